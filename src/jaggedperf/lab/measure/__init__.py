"""How the lab measures: one home for every timing rule.

``timing`` (wall per call by the seed's method, device time by graph replay or profiler sums, the host probe),
``rounds`` (interleaved rounds and their within-round ratios, quiet rounds), ``stats`` (medians, quantiles, stability),
``env`` (the machine and its load) and ``correctness`` (outputs against float64 before anything is timed).
"""
