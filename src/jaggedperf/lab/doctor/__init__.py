"""The doctor: why a compiled cell is slower (or faster) than its eager twin.

- ``probes``: what Dynamo and Inductor did (graphs, breaks, recompiles, guards and their cost,
  cudagraph skip messages); they know nothing of jagged ops;
- ``evidence``: the sections of what was measured about one cell, and the pure pieces derived from
  recorded numbers (padding model, compile cost, host time, kernel bandwidths);
- ``gather``: runs the cell's callables and fills in its evidence;
- ``reconcile``: times the eager and compiled calls again, side by side, when their parts do not add up to Δ;
- ``attribution``: evidence → the measured parts of compiled − eager (pure functions);
- ``verdicts``: evidence and its attribution → a diagnosis: verdict, findings, remedy (pure functions).
"""
