"""Config buckets: depend on M, dtype and device only; chunking is sym-friendly and covers every row."""

import pytest
import torch

from jaggedperf.ops import config
from jaggedperf.ops.reduce import plan

CPU = torch.device("cpu")


@pytest.mark.parametrize("M", [1, 3, 16, 17, 64, 129, 256, 257, 4096])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_buckets_are_powers_of_two_and_cover_the_row(M, dtype):
    cfg = config.reduce_config(M, dtype, CPU)
    for n in (cfg.block_l, cfg.block_m, cfg.block_p):
        assert n & (n - 1) == 0
    assert cfg.block_m >= min(M, 256) and cfg.block_m <= 256
    assert cfg.min_chunk_rows % cfg.block_l == 0
    assert cfg.block_l * cfg.block_m <= 8192


@pytest.mark.parametrize("n_rows", [0, 1, 15, 16, 17, 1000, 123457, 2**31 + 5])
@pytest.mark.parametrize("M", [1, 64, 300])
def test_merge_programs_cover_all_units_at_least_one_program(n_rows, M):
    # the production plan on meta tensors (no memory, any N): its reduce launch's K, P and grid
    cfg = config.merge_config(M, torch.float32)
    values = torch.empty(n_rows, M, device="meta")
    offsets = torch.empty(8, dtype=torch.int64, device="meta")
    reduce_launch = plan.plan_reduce(values, offsets, mean=True, empty_zero=False).launches[0]
    units, programs = reduce_launch.args[6:8]
    col_blocks = reduce_launch.grid[1]
    assert reduce_launch.grid == (programs, col_blocks, 1)
    assert programs >= 1 and units >= cfg.min_units
    assert units * programs >= n_rows + 7 and units * (programs - 1) < n_rows + 7
    assert col_blocks * cfg.block_m >= M
    if n_rows > 10**6:  # large N: the target number of programs
        assert programs * col_blocks <= config.sm_count(CPU) * cfg.programs_per_sm + col_blocks


def test_override_replaces_fields_and_restores():
    base = config.reduce_config(64, torch.float32, CPU)
    with config.override(block_l=8, num_warps=1):
        cfg = config.reduce_config(64, torch.float32, CPU)
        assert (cfg.block_l, cfg.num_warps, cfg.min_chunk_rows) == (8, 1, 32)
    assert config.reduce_config(64, torch.float32, CPU) == base
    whole = config.ReduceConfig(16, 64, 2, 4, 16)
    with config.override(whole):
        assert config.reduce_config(3, torch.float16, CPU) is whole
    with pytest.raises(ValueError, match="unknown config fields"):
        config.set_override({"blockl": 3})


@pytest.mark.parametrize("M", [1, 3, 16, 64, 129, 256, 4096])
@pytest.mark.parametrize("max_seqlen", [0, 1, 7, 64, 100, 275, 1000, 20000])
@pytest.mark.parametrize("B", [1, 3, 512, 65536])
def test_segments_config_fits_its_tile_budget_or_declines(M, max_seqlen, B):
    cfg = config.segments_config(M, max_seqlen, B, CPU)
    if cfg is None:
        return
    for n in (cfg.group, cfg.block_l, cfg.block_m):
        assert n & (n - 1) == 0
    assert cfg.group * cfg.block_l * cfg.block_m <= config.SEGMENT_TILE_ELEMENTS
    assert -(-max(max_seqlen, 1) // cfg.block_l) <= config.SEGMENT_TILES
    assert cfg.group == 1 or cfg.block_l >= max_seqlen  # several segments per program only when each is one tile
    col_blocks = -(-M // cfg.block_m)
    assert -(-B // cfg.group) * col_blocks >= config.sm_count(CPU)  # the grid fills the SMs
    if cfg.programs:  # the looping form: only for many small groups, every program with several of them
        assert cfg.group >= config.LOOP_MIN_GROUP
        assert -(-B // cfg.group) >= config.LOOP_GROUPS_PER_PROGRAM * cfg.programs


def test_segments_config_declines_long_sequences_and_small_batches():
    assert config.segments_config(64, 20000, 256, CPU) is None  # 20000 rows: the chunked kernels balance them
    assert config.segments_config(64, 100, 2, CPU) is None  # 2 programs for 4 SMs
    seed = config.segments_config(64, 100, 512, CPU)
    assert (seed.group, seed.block_l, seed.block_m) == (1, 128, 64)  # one (128, 64) load per sequence
    tiny = config.segments_config(16, 64, 65536, CPU)
    assert tiny.group * tiny.block_l * tiny.block_m == config.SEGMENT_TILE_ELEMENTS and tiny.group > 1
    # one program per group at the seed shape; at 65536 tiny rows a fixed grid of looping programs
    assert seed.programs == 0
    assert tiny.programs == config.sm_count(CPU) * config.LOOP_PROGRAMS_PER_SM


def _symbolic(shape_env, value, name):
    from torch._dynamo.source import ConstantSource

    return shape_env.create_symintnode(shape_env.create_symbol(value, ConstantSource(name)), hint=value)


def test_traced_segments_choice_guards_max_seqlen_only_never_b():
    # under torch.compile(dynamic=True) max_seqlen and B arrive as SymInts: the config comes from their
    # example values, with one guard (every sequence still fits the tiles) and none on B
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from jaggedperf.ops.reduce.plan import _segments_for

    cpu = torch.device("cpu")
    shape_env = ShapeEnv()
    longest, batch = _symbolic(shape_env, 130, "max_seqlen"), _symbolic(shape_env, 512, "B")
    traced = _segments_for(64, longest, batch, cpu)
    assert traced == config.segments_config(64, 130, 512, cpu) and traced is not None
    guarded = {str(s) for g in shape_env.guards for s in g.expr.free_symbols}
    assert guarded == {str(longest.node.expr)}, shape_env.guards

    def holds(value):
        return all(bool(g.expr.subs({longest.node.expr: value})) for g in shape_env.guards)

    assert holds(130) and holds(traced.block_l * config.SEGMENT_TILES)
    assert not holds(traced.block_l * config.SEGMENT_TILES + 1)  # past the tiles: the guard fails, a recompile


def test_traced_segments_choice_declines_what_the_host_choice_declines():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from jaggedperf.ops.reduce.plan import _segments_for

    shape_env = ShapeEnv()
    assert _segments_for(64, _symbolic(shape_env, 20000, "L"), _symbolic(shape_env, 256, "B"), torch.device("cpu")) is None
    assert _segments_for(64, 20000, 256, torch.device("cpu")) is None
