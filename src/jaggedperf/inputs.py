"""Case -> batch: the numbers that describe a jagged input, and the seeded generator that makes it.

Lengths are drawn on the CPU from a ``torch.Generator`` seeded with ``case.seed``, so the same case
has the same lengths on every machine and device. Values are drawn on the target device from a
generator seeded with the same seed: reproducible run to run on one device type.

Distributions (``case.distribution``):

- ``tritonbench``: as tritonbench's jagged ops. avg = floor(seqlen·(1−sparsity)),
  margin = floor(0.3·seqlen), each length uniform in [max(avg−margin, 1), min(avg+margin, seqlen)].
- ``heavy``: heavy-tailed. 5% of sequences empty; the rest Pareto(α=1.5) with scale
  x_m = max(1, seqlen·(1−sparsity)/100), rounded down and clipped to seqlen. A few sequences reach
  seqlen, most are near x_m: the load-balance stress case.
- ``fixed``: every length = max(floor(seqlen·(1−sparsity)), 0).
- ``empty``: many empty sequences. Each sequence is empty with probability ``sparsity``; the others have a
  length uniform in [1, seqlen] (0 when seqlen is 0).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch

from jaggedperf.batch import JaggedBatch

DISTRIBUTIONS = ("tritonbench", "heavy", "fixed", "empty")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
DEFAULT_SEED = 1337

HEAVY_EMPTY_FRACTION = 0.05
HEAVY_ALPHA = 1.5


@dataclass(frozen=True)
class Case:
    B: int
    M: int
    seqlen: int
    sparsity: float
    distribution: str = "tritonbench"
    dtype: str = "float32"
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if self.B < 0 or self.M < 1 or self.seqlen < 0:
            raise ValueError(f"case needs B >= 0, M >= 1, seqlen >= 0; got B={self.B} M={self.M} seqlen={self.seqlen}")
        if not 0.0 <= self.sparsity <= 1.0:
            raise ValueError(f"sparsity must be in [0, 1]; got {self.sparsity}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {self.distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def label(self) -> str:
        """Short readable id, e.g. ``B512-M64-L100-s0.1`` (+ distribution/dtype when not default)."""
        parts = [f"B{self.B}", f"M{self.M}", f"L{self.seqlen}", f"s{self.sparsity:g}"]
        if self.distribution != "tritonbench":
            parts.append(self.distribution)
        if self.dtype != "float32":
            parts.append(self.dtype)
        if self.seed != DEFAULT_SEED:
            parts.append(f"seed{self.seed}")
        return "-".join(parts)

    def values_nbytes(self) -> int:
        """Bytes of the values tensor, total_len·M·itemsize (only the lengths are drawn, on the CPU)."""
        return total_length(self) * self.M * torch.empty((), dtype=self.torch_dtype).element_size()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        return cls(**{k: d[k] for k in ("B", "M", "seqlen", "sparsity", "distribution", "dtype", "seed") if k in d})


def canonical_dtype(name: str) -> str:
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}")
    return name


def tritonbench_bounds(seqlen: int, sparsity: float) -> tuple[int, int]:
    """Inclusive [low, high] of tritonbench's uniform lengths."""
    avg = math.floor(seqlen * (1 - sparsity))
    margin = math.floor(0.3 * seqlen)
    low = max(avg - margin, 1)
    high = min(avg + margin, seqlen)
    return low, max(high, low)


def length_bounds(case: Case) -> tuple[int, int]:
    """Inclusive [low, high] of every one of the case's lengths, from its numbers alone (nothing is drawn):
    what ``make_lengths`` can give for any seed. A size check uses it before drawing B lengths."""
    if case.distribution == "tritonbench":
        return tritonbench_bounds(case.seqlen, case.sparsity)
    if case.distribution == "fixed":
        length = max(math.floor(case.seqlen * (1 - case.sparsity)), 0)
        return length, length
    return 0, case.seqlen  # heavy and empty: some empty, at most seqlen


def make_lengths(case: Case) -> torch.Tensor:
    """(B,) int64 lengths on the CPU, drawn from ``case.seed``."""
    gen = torch.Generator().manual_seed(case.seed)
    if case.B == 0:
        return torch.zeros(0, dtype=torch.int64)
    if case.distribution == "tritonbench":
        low, high = tritonbench_bounds(case.seqlen, case.sparsity)
        return torch.randint(low, high + 1, (case.B,), generator=gen, dtype=torch.int64)
    if case.distribution == "fixed":
        return torch.full((case.B,), max(math.floor(case.seqlen * (1 - case.sparsity)), 0), dtype=torch.int64)
    if case.distribution == "empty":
        lengths = torch.randint(min(1, case.seqlen), case.seqlen + 1, (case.B,), generator=gen, dtype=torch.int64)
        empty = torch.rand(case.B, generator=gen, dtype=torch.float64) < case.sparsity
        return lengths.masked_fill(empty, 0)
    # heavy
    scale = max(1.0, case.seqlen * (1 - case.sparsity) / 100)
    u = torch.rand(case.B, generator=gen, dtype=torch.float64).clamp_min(1e-12)
    lengths = torch.floor(scale * u.pow(-1.0 / HEAVY_ALPHA)).clamp(max=case.seqlen).to(torch.int64)
    empty = torch.rand(case.B, generator=gen) < HEAVY_EMPTY_FRACTION
    return lengths.masked_fill(empty, 0)


def total_length(case: Case) -> int:
    """Sum of the case's lengths: rows of its values tensor. Cached, as M and dtype do not change it."""
    return _total_length(case.B, case.seqlen, case.sparsity, case.distribution, case.seed)


@functools.lru_cache(maxsize=4096)
def _total_length(B: int, seqlen: int, sparsity: float, distribution: str, seed: int) -> int:
    return int(make_lengths(Case(B, 1, seqlen, sparsity, distribution, seed=seed)).sum())


def make_offsets(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's lengths and their int64 offsets (B + 1,), both on the CPU (drawn as ``make_lengths``).

    Args:
        case: the case.

    Returns:
        ``(lengths, offsets)``; offsets[0] == 0, offsets[-1] == the total length.
    """
    lengths = make_lengths(case)
    offsets = torch.zeros(case.B + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return lengths, offsets


def make_batch(case: Case, device: torch.device | str = "cpu") -> JaggedBatch:
    """The batch a case describes: values ~ N(0, 1) in the case dtype, int64 offsets, on ``device``."""
    device = torch.device(device)
    lengths, offsets = make_offsets(case)
    total = int(offsets[-1])
    gen = torch.Generator(device=device).manual_seed(case.seed)
    values = torch.randn(total, case.M, generator=gen, device=device, dtype=torch.float32).to(case.torch_dtype)
    longest = int(lengths.max()) if case.B else 0
    shortest = int(lengths.min()) if case.B else 0
    return JaggedBatch(values, offsets.to(device), longest, shortest, max(case.seqlen, longest))
