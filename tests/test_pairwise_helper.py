"""``helpers.pairwise``: the grids the interpreter's kernel tests draw hold every pair of values, deterministically."""

import itertools

from helpers.pairwise import pairs_of, pairwise


def test_every_pair_of_values_meets_in_some_row_and_the_grid_is_smaller_than_the_product():
    for sizes in ([10, 3, 2, 2], [10, 3, 2], [2, 2], [4, 1, 3], [3]):
        rows = pairwise(sizes)
        product = list(itertools.product(*(range(n) for n in sizes)))
        wanted = set().union(*(pairs_of(row) for row in product))
        assert set().union(*(pairs_of(row) for row in rows)) == wanted, sizes
        assert set(rows) <= set(product) and len(rows) <= len(product)
        assert rows == pairwise(sizes)  # the same grid every run: test ids never move
    assert len(pairwise([10, 3, 2, 2])) == 30 and len(pairwise([10, 3, 2])) == 30  # the case x parts pairs alone
