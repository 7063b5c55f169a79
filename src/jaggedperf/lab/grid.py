"""Grids of cases for a sweep: axis values from lists and ranges, the presets (the seed's two shapes,
tritonbench's default jagged sweep, the kernel classes), axes given explicitly that replace a preset's, and the byte-limit
filter a sweep applies before it dispatches anything.

An axis value is written as a number or an inclusive range ``START:STOP[:STEP]`` (STEP defaults to 1;
STOP is included when it lands on it), several separated by commas: ``100:1000:100``, ``0.1:0.9:0.1``,
``64,128,1e3``. Ranges are computed in decimal, so ``0.1:0.9:0.1`` gives exactly 0.1, 0.2, ..., 0.9.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace
from decimal import Decimal, InvalidOperation
from typing import Callable, Iterable, Sequence, TypeVar

from jaggedperf.inputs import DEFAULT_SEED, Case
from jaggedperf.lab.input_size import InputTooLarge, input_too_large
from jaggedperf.names import unknown_message

MAX_RANGE_VALUES = 100_000  # a range longer than this is a typo, not a sweep

# tritonbench's default jagged sweep (operators/jagged_*: B and M from get_dim_vals(sizes)).
TRITONBENCH_SIZES = (2, 6, 10, 12, 15, 18, 21)
TRITONBENCH_SEQLENS = (100, 500, 1000, 3000, 10000, 18000)
TRITONBENCH_SPARSITIES = (0.1, 0.25, 0.5, 0.75, 0.9)

# The two shapes of pytorch/pytorch#160355.
SEED_CASES = (Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75))

T = TypeVar("T")


@dataclass(frozen=True)
class Grid:
    """Every combination of the axes' values is a case. Fields are in ``Case``'s order."""

    B: tuple[int, ...]
    M: tuple[int, ...]
    seqlen: tuple[int, ...]
    sparsity: tuple[float, ...]
    distribution: tuple[str, ...] = ("tritonbench",)
    dtype: tuple[str, ...] = ("float32",)
    seed: tuple[int, ...] = (DEFAULT_SEED,)

    def cases(self) -> list[Case]:
        return [Case(*values) for values in itertools.product(*(getattr(self, a) for a in AXES))]


AXES = tuple(f.name for f in fields(Grid))
REQUIRED_AXES = ("B", "M", "seqlen", "sparsity")  # the axes without a default when there is no preset


def dim_vals(sizes: Iterable[int]) -> list[int]:
    """tritonbench's ``get_dim_vals``: 2**n for each n, then (n-1)(n+1) for each n with n-1 > 0 that is
    not already there."""
    sizes = list(sizes)
    vals = [2**n for n in sizes]
    for n in sizes:
        if n - 1 > 0 and (n - 1) * (n + 1) not in vals:
            vals.append((n - 1) * (n + 1))
    return vals


def _one(case: Case, dtypes: tuple[str, ...] = ("float32",)) -> Grid:
    """The grid of one case (in each of ``dtypes``)."""
    return Grid((case.B,), (case.M,), (case.seqlen,), (case.sparsity,), (case.distribution,), dtypes, (case.seed,))


# The shapes of the reduction bars (tests/gpu/test_bars_gpu.py, ops_bench's looping-kernel shape, the kernel bars').
BAR_CASES = (Case(1024, 256, 1000, 0.5), Case(4096, 512, 512, 0.2), Case(256, 64, 20000, 0.5),
             Case(4096, 128, 32768, 0.0, "heavy"), Case(8, 4096, 4000, 0.0, "fixed"), Case(65536, 16, 64, 0.2),
             Case(32768, 64, 32, 0.2), Case(65536, 16, 64, 0.5))
FP_BOTH = ("float32", "bfloat16")

# The kernel classes of shapes, each a tuple of grids; the preset "kernels" is all of them, in this order.
# Sizes (fp32 values): narrow 1.3 MB-1 GB; odd widths 38 MB-2.4 GB (mean length ~192 rows); power-law small
# 11-88 MB, large 0.5-1.9 GB (5% empty); giant one segment 0.5-1 GB; empty-heavy 11-850 MB; bars up to 3.2 GB.
KERNEL_CLASSES: dict[str, tuple[Grid, ...]] = {
    # M in {4, 8, 12, 16, 32}, 10^4-10^6 segments of 4-12 rows (tritonbench lengths, seqlen 16, sparsity 0.5)
    "narrow": (Grid((10_000, 100_000, 1_000_000), (4, 8, 12, 16, 32), (16,), (0.5,)),
               Grid((100_000,), (4, 8, 16, 32), (16,), (0.5,), dtype=("bfloat16",))),
    # widths that are not powers of two, 2048 segments of 128-256 rows
    "odd_width": (Grid((2048,), (24, 48, 96, 200, 384, 640, 1000, 1500), (256,), (0.2,)),
                  Grid((2048,), (200, 1000), (256,), (0.2,), dtype=("bfloat16",))),
    # power-law lengths (inputs' "heavy": Pareto α=1.5, 5% empty), 10-100 MB
    "powerlaw_small": (_one(Case(4096, 64, 400, 0.0, "heavy")), _one(Case(4096, 128, 1000, 0.0, "heavy"), FP_BOTH),
                       _one(Case(8192, 256, 400, 0.0, "heavy"))),
    # power-law lengths at large totals, with empty segments
    "powerlaw_large": (_one(Case(20000, 128, 2000, 0.0, "heavy")), _one(Case(4096, 128, 32768, 0.0, "heavy"), FP_BOTH)),
    # one giant segment (B = 1, >= 10^6 rows)
    "giant": (_one(Case(1, 64, 2_000_000, 0.0, "fixed"), FP_BOTH), _one(Case(1, 256, 1_000_000, 0.0, "fixed"))),
    # most segments empty (inputs' "empty": each empty with probability sparsity)
    "empty": (_one(Case(100_000, 64, 64, 0.9, "empty")), _one(Case(1_000_000, 16, 32, 0.99, "empty")),
              _one(Case(65536, 256, 512, 0.95, "empty"), FP_BOTH)),
    "seed": tuple(_one(c, FP_BOTH) for c in SEED_CASES),
    "bars": tuple(_one(c) for c in BAR_CASES),
}

PRESETS: dict[str, tuple[Grid, ...]] = {
    "seed": tuple(Grid((c.B,), (c.M,), (c.seqlen,), (c.sparsity,)) for c in SEED_CASES),
    "tritonbench": (Grid(tuple(dim_vals(TRITONBENCH_SIZES)), tuple(dim_vals(TRITONBENCH_SIZES)),
                         TRITONBENCH_SEQLENS, TRITONBENCH_SPARSITIES),),
    "kernels": tuple(g for grids in KERNEL_CLASSES.values() for g in grids),
}


def kernel_classes() -> dict[str, list[Case]]:
    """The kernel classes of shapes and their cases, in order; a case in two classes is kept in the first."""
    seen: set[Case] = set()
    out: dict[str, list[Case]] = {}
    for name, grids in KERNEL_CLASSES.items():
        out[name] = [c for c in _unique(c for g in grids for c in g.cases()) if c not in seen]
        seen.update(out[name])
    return out


def expand(preset: str | None = None, **axes: Sequence | None) -> list[Case]:
    """The cases of ``preset`` with every axis given in ``axes`` (not None) replacing the preset's values;
    without a preset, B, M, seqlen and sparsity must be given. In order, without repeats."""
    unknown = sorted(set(axes) - set(AXES))
    if unknown:
        raise ValueError(unknown_message("axis", unknown[0], list(AXES)))
    given = {name: tuple(_unique(values)) for name, values in axes.items() if values is not None}
    empty = [name for name, values in given.items() if not values]
    if empty:
        raise ValueError(f"no values for {', '.join(empty)}")
    if preset is None:
        missing = [a for a in REQUIRED_AXES if a not in given]
        if missing:
            raise ValueError(f"give {', '.join('--' + a for a in missing)} (or a preset: {', '.join(PRESETS)})")
        grids: tuple[Grid, ...] = (Grid(**given),)
    elif preset in PRESETS:
        grids = tuple(replace(g, **given) for g in PRESETS[preset])
    else:
        raise ValueError(unknown_message("preset", preset, list(PRESETS)))
    return list(_unique(case for g in grids for case in g.cases()))


def split_by_size(cases: Iterable[Case], byte_limit: int) -> tuple[list[Case], list[tuple[Case, InputTooLarge]]]:
    """(cases that fit, (case, why) for each case whose values alone pass ``byte_limit``). Only the
    lengths are drawn, once per (B, seqlen, sparsity, distribution, seed): cheap even for a large grid."""
    fit, too_large = [], []
    for case in cases:
        problem = input_too_large(case, byte_limit)
        if problem is None:
            fit.append(case)
        else:
            too_large.append((case, problem))
    return fit, too_large


# --- axis values from text ------------------------------------------------------------------------


def int_values(text: str) -> list[int]:
    """``"100"``, ``"100:1000:100"``, ``"1,2,8:32:8"`` -> integers (ranges inclusive of a STOP they land on)."""
    return _values(text, _integer)


def float_values(text: str) -> list[float]:
    """``"0.5"``, ``"0.1:0.9:0.1"``, ``"0.1,0.25"`` -> floats, the ranges computed in decimal (no 0.30000000000000004)."""
    return _values(text, float)


def _values(text: str, convert: Callable[[Decimal], T]) -> list[T]:
    out: list[T] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) == 1:
            out.append(convert(_number(parts[0])))
            continue
        if len(parts) > 3:
            raise ValueError(f"{item!r}: a range is START:STOP or START:STOP:STEP")
        start, stop = _number(parts[0]), _number(parts[1])
        step = _number(parts[2]) if len(parts) == 3 else Decimal(1)
        if step <= 0:
            raise ValueError(f"{item!r}: STEP must be positive")
        if stop < start:
            raise ValueError(f"{item!r}: STOP is below START")
        count = int((stop - start) / step) + 1  # the quotient is >= 0: int() is floor
        if count > MAX_RANGE_VALUES:
            raise ValueError(f"{item!r}: {count} values (at most {MAX_RANGE_VALUES})")
        out.extend(convert(start + i * step) for i in range(count))
    if not out:
        raise ValueError(f"no values in {text!r}")
    return out


def _number(text: str) -> Decimal:
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {text.strip()!r}") from None
    if not d.is_finite():
        raise ValueError(f"not a finite number: {text.strip()!r}")
    return d


def _integer(d: Decimal) -> int:
    if d != d.to_integral_value():
        raise ValueError(f"not an integer: {d}")
    return int(d)


def _unique(values: Iterable[T]) -> Iterable[T]:
    return dict.fromkeys(values)
