"""Pairwise (all-pairs) test grids: every value of each factor meets every value of every other factor in some row.

A full cross of a case list with three kernel options (parts, tiles, passes) is 12 rows a case; under the interpreter
that grid was ~200 s of CI's ~2000. Faults in these kernels come from one option or from two meeting (a tiny tile over
eight parts, a per-element pass over a ragged column block); a grid that holds every pair keeps those, in 3 rows a
case. Greedy, deterministic (the AETG construction): each row is the product's first that covers the most pairs
still uncovered.
"""

from __future__ import annotations

import itertools


def pairs_of(row: tuple) -> set:
    """The (factor, value index, factor, value index) pairs one row of indices covers."""
    return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}


def pairwise(sizes: list[int]) -> list[tuple[int, ...]]:
    """Rows of value indices, one index per factor (``sizes[k]`` values for factor k), that cover every pair.

    Args:
        sizes: how many values each factor has (each >= 1).

    Returns:
        the rows, in the order built; with fewer than two factors, the full product.
    """
    product = list(itertools.product(*(range(n) for n in sizes)))
    if len(sizes) < 2:
        return product
    uncovered = set().union(*(pairs_of(row) for row in product))
    rows = []
    while uncovered:
        best = max(product, key=lambda row: len(pairs_of(row) & uncovered))  # first of the most: deterministic
        rows.append(best)
        uncovered -= pairs_of(best)
    return rows
