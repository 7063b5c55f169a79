"""Helpers the tests share: float64 references, fake clocks and results, isolated interpreters, compiler probes.

A package imported as ``helpers`` (``tests`` is on pytest's ``pythonpath``, pyproject.toml); a subprocess that
needs it gets ``helpers.isolated.pythonpath()``. Nothing here imports ``benchmarks/``.
"""
