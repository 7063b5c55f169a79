"""compile: torch.compile for functions of jagged NestedTensors, with the NJT taken apart at the boundary.

A compiled function that takes a jagged NestedTensor (NJT) pays, on every call, Dynamo's guards on
the NJT (~30 of them, some in Python) and the compiled runtime's subclass flattening, ~250-300 µs
per call on an H200 host under torch 2.11 (``benchmarks/NOTES.md``). The same computation compiled
on the NJT's components costs what any dense compiled call costs. ``compile`` makes that the
default for any function:

- outside, each NJT argument (anywhere in the args/kwargs pytree) becomes a ``Parts`` (``crossing``):
  ``values``, ``offsets`` and its cached ``(max_seqlen, 0)`` tensor (the NJT's own metadata-cache
  tensor, so nothing is allocated or synced), plain tensors. Positional arguments alone (the common
  call) cross flat, one tensor per argument, so the compiled region's guards are those of the same
  function compiled on plain tensors; kwargs and containers take the pytree path;
- inside the compiled region each ``Parts`` is rebuilt into an NJT with
  ``torch.nested.nested_tensor_from_jagged`` (traceable: it is a view op) and ``fn`` runs on it;
- an NJT that ``fn`` returns leaves the compiled region as a ``Parts`` and is rebuilt outside.

Invariants:
- ``values`` crosses as ``nt._values`` (an attribute read) unless grad is enabled and the NJT
  requires grad; then as ``nt.values()``, the differentiable view, so gradients reach the user's
  leaves as with ``torch.compile(fn)``. An NJT output that requires grad is rebuilt with the
  differentiable view op ``torch._nested_view_from_jagged``; otherwise with the NestedTensor
  constructor (no dispatch).
- Unless ``dynamic=False``, the ragged dims cross marked dynamic (values dim 0, offsets dim 0, the
  seqlen tensors' dim 0), on every call so every compile sees the same markings: B, the total length
  and max_seqlen changing between calls do not recompile. As for any size in Dynamo (and for
  ``torch.compile`` on the NJT itself), a max_seqlen of 0 or 1 is specialised. min_seqlen does not
  cross: batches with empty or one-row sequences are common, and a min_seqlen moving between 0, 1
  and ≥ 2 would compile up to three graphs where the same function on plain tensors compiles one
  (a function that reads it inside gets it computed from the offsets, as for an NJT without it).
- Every compiled function gets its own code object for the compiled region, so Dynamo's per-code
  cache (and its recompile limit) is per function, as with ``torch.compile(fn)``.
- A function that reads the lengths as Python numbers (``nt.unbind()``, ``offsets.tolist()``: the seed's
  ``unbind_mean``) cannot be traced on components whose sizes are symbolic: Dynamo raises on the data-
  dependent value. Such a function is compiled again, and from then on called, with Dynamo capturing
  scalar outputs and dynamic output shapes (``_DATA_DEPENDENT``), so the lengths become unbacked symbols:
  one graph per batch size B, whatever the lengths. Only those functions pay for the config patch (a
  context manager per call); the others are called bare.
- What cannot cross this way falls back to ``torch.compile(fn)`` for that call, with one
  ``warnings.warn`` per reason per compiled function: an NJT with ``lengths`` (holes), an NJT whose
  ragged dim is not 1, or a Dynamo/backend failure when compiling on the components (after the data-
  dependent retry, where it applies).
"""

from jaggedperf.boundary.function import BoundaryFallbackWarning, BoundaryFunction, BoundaryModule, compile

__all__ = ["BoundaryFunction", "BoundaryModule", "BoundaryFallbackWarning", "compile"]
