"""jaggedperf: measure, explain and fix jagged ops (reductions, softmax, layer norm) in eager PyTorch and under
torch.compile.

The public names load on first use (PEP 562): ``import jaggedperf`` alone imports no torch, so that the command
line's ``--help``, ``--version`` and parsers start in well under two seconds (the console script imports this
package first). Where torch is already imported (``import torch, jaggedperf``: a library user), everything is
imported at once, as it always was: the operators are registered with torch (``torch.ops.jaggedperf.*``, an
AOTInductor package's calls) as soon as ``import jaggedperf`` returns. Either way, touching any public name
(``jaggedperf.jagged_mean``) or importing ``jaggedperf.ops`` registers them.
"""

from __future__ import annotations

import importlib
import sys

__version__ = "0.1.0"

# public name -> the module it comes from
_PUBLIC = {
    "Results": "jaggedperf.lab.api", "bench": "jaggedperf.lab.api", "load": "jaggedperf.lab.api",
    "measure": "jaggedperf.lab.api",
    "JaggedBatch": "jaggedperf.batch",
    "compile": "jaggedperf.boundary",
    "Case": "jaggedperf.inputs", "make_batch": "jaggedperf.inputs",
    "jagged_layer_norm": "jaggedperf.ops", "jagged_mean": "jaggedperf.ops", "jagged_softmax": "jaggedperf.ops",
    "jagged_sum": "jaggedperf.ops",
}
__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'jaggedperf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


if "torch" in sys.modules:
    for _name in _PUBLIC:
        __getattr__(_name)
