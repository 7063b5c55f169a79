"""The order of ``scripts/test.sh``'s parallel pass: the longest tests first.

pytest-xdist hands the tests to its workers in collection order (``--dist load --maxschedchunk 1``: two to start with,
then one whenever a worker finishes one). In file order the slowest sat together: one worker drew the offsets property,
the memcheck sample, the compile-time assert and forward AD in its first chunk (~240 s of work) while the others ran
dry, and the pass took 290 s for ~1600 s of work on 8 workers. Longest first, the long tests start together and the
short ones fill in behind them (list scheduling: the pass ends near its work / workers, or its longest test).

``SECONDS`` are the H200's durations in the parallel pass (its slowest tests, from the suite's last whole run, and
the parts of the tests split since then by their share); a key names a test, or the start of a test id with its
parameters. Any other test counts as ``DEFAULT_S``. A figure only orders the tests: a stale one costs minutes, never
a result.
"""

from __future__ import annotations

DEFAULT_S = 1.0

SECONDS = {
    "tests/gpu/test_ops_gpu.py::test_aot_inductor_package_on_cuda_matches_eager": 104,
    "tests/lab/test_sweep.py::test_faults_on_a_gpu_worker": 73,
    "tests/lab/test_sweep.py::test_every_gpu_gets_its_own_worker_that_sees_only_it": 17,
    # 130 s for the five widths in one process; the native path after them, their kernels cached
    "tests/gpu/test_bad_inputs_gpu.py::test_any_offsets_through_the_cuda_kernels_never_crash[python-path": 30,
    "tests/gpu/test_bad_inputs_gpu.py::test_any_offsets_through_the_cuda_kernels_never_crash[native-path": 16,
    "tests/gpu/test_bad_inputs_gpu.py::test_validate_under_compile_asserts_on_the_device": 29,
    "tests/gpu/test_bad_inputs_gpu.py::test_invalid_offsets_under_memcheck_access_nothing_out_of_bounds": 25,
    "tests/gpu/test_bad_inputs_gpu.py::test_forward_mode_ad_on_cuda_passes_the_fast_paths_by": 21,
    "tests/gpu/test_bad_inputs_gpu.py::test_operators_take_non_contiguous_values": 10,
    # the rec block: 82 s for four implementations in the max-autotune mode, 12 in compile:default
    "tests/gpu/test_model_gpu.py::test_rec_block_runs_correctly_in_every_mode_family_at_the_seed_shape"
    "[jagged-compile:max-autotune-no-cudagraphs": 25,
    # ours in that mode: the model bar's compile-and-check (test_compile_bars_gpu.py) compiles the same graphs; started
    # after it, these load them (started beside it, both would compile them)
    "tests/gpu/test_model_gpu.py::test_rec_block_runs_correctly_in_every_mode_family_at_the_seed_shape"
    "[jagged-compile:max-autotune-no-cudagraphs-jaggedperf": 8,
    "tests/gpu/test_model_gpu.py::test_rec_block_runs_correctly_in_every_mode_family_at_the_seed_shape": 3,
    "tests/gpu/test_model_gpu.py::test_the_seeds_njt_implementations_compile_and_match_float64": 10,
    # the model bar's cells: 53 / 29 / 22 / 18 s for both seed cases in one test, now one case a test
    "tests/gpu/test_compile_bars_gpu.py::test_model_block_compiles_and_matches_float64_in_every_bar_mode"
    "[jaggedperf_njt-jagged-compile:max-autotune-no-cudagraphs": 27,
    "tests/gpu/test_compile_bars_gpu.py::test_model_block_compiles_and_matches_float64_in_every_bar_mode"
    "[jaggedperf-compile:reduce-overhead": 15,
    "tests/gpu/test_compile_bars_gpu.py::test_model_block_compiles_and_matches_float64_in_every_bar_mode"
    "[jaggedperf-jagged-compile:max-autotune-no-cudagraphs": 11,
    "tests/gpu/test_compile_bars_gpu.py::test_model_block_compiles_and_matches_float64_in_every_bar_mode"
    "[jaggedperf-compile:max-autotune-no-cudagraphs": 9,
    "tests/gpu/test_compile_bars_gpu.py::test_model_block_compiles_and_matches_float64_in_every_bar_mode": 4,
    "tests/gpu/test_compile_bars_gpu.py::test_the_boundary_cells_compile_and_match_float64": 10,
    "tests/gpu/test_compile_bars_gpu.py::test_our_njt_through_the_boundary_and_its_twins_compile_and_match_float64": 9,
    "tests/gpu/test_boundary_workloads_gpu.py::test_workload_compiles_on_the_components_and_matches_eager": 25,
    "tests/gpu/test_kernel_bars_gpu.py::test_contenders_compile_and_ours_match_float64": 5,
    "tests/gpu/test_doctor_gpu.py::test_cli_on_the_gpu_writes_json_and_traces": 23,
    "tests/gpu/test_family_gpu.py::test_inductor_padded_peer_matches_float64[jagged_layer_norm-B8-M4096-L4000-s0-"
    "fixed]": 37,
    "tests/gpu/test_family_gpu.py::test_inductor_padded_peer_matches_float64[jagged_softmax-B512-M64-L100-s0.1-"
    "bfloat16]": 22,
    "tests/gpu/test_family_gpu.py::test_inductor_padded_peer_matches_float64[jagged_layer_norm-B512-M64-L100-s0.1-"
    "bfloat16]": 15,
    "tests/gpu/test_family_gpu.py::test_inductor_padded_peer_matches_float64": 11,
    "tests/gpu/test_family_gpu.py::test_compile_fullgraph_dynamic_without_recompiling": 12,
    "tests/gpu/test_family_gpu.py::test_the_split_under_compile_and_in_a_cuda_graph": 9,
    "tests/gpu/test_family_gpu.py::test_forward_matches_float64_with_and_without_max_seqlen": 4,
    "tests/gpu/test_family_gpu.py::test_backward_matches_float64": 4,
    "tests/gpu/test_ops_gpu.py::test_deterministic_bitwise": 13,
    "tests/gpu/test_ops_gpu.py::test_large_cases_match_float64": 8,
    "tests/gpu/test_ops_gpu.py::test_compiled_backward": 8,
    "tests/gpu/test_native_gpu.py::test_backward_served_natively_and_equal_to_the_python_path": 7,
}


def estimate(nodeid: str) -> float:
    """Seconds ``nodeid`` is expected to take: the longest key of ``SECONDS`` it starts with, else ``DEFAULT_S``."""
    best = max((key for key in SECONDS if nodeid.startswith(key)), key=len, default=None)
    return float(SECONDS[best]) if best is not None else DEFAULT_S


def longest_first(items: list, workers: int) -> list:
    """``items`` (anything with a ``nodeid``) longest first, collection order among equals. The first ``2 * workers``
    pair each of the ``workers`` longest with one of the shortest, as xdist's first two a worker: no worker starts with
    two long tests, one waiting behind the other."""
    ordered = sorted(items, key=lambda item: -estimate(item.nodeid))  # stable
    if workers < 2 or len(ordered) <= 2 * workers:
        return ordered
    longest, shortest, rest = ordered[:workers], ordered[-workers:][::-1], ordered[workers:-workers]
    return [item for pair in zip(longest, shortest) for item in pair] + rest
