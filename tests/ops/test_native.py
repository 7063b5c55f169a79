"""The native launch path on the CPU: the module builds against the installed torch; its key, grid and
parameter block are what a launch would use; the Python side's plan reading, first-launch check and
fallbacks. Launching needs a GPU (tests/gpu/test_native_gpu.py)."""

import dataclasses
import os
import shutil
import struct
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jaggedperf
from jaggedperf.ops import config, launch
from jaggedperf.ops.launch import layout, native
from jaggedperf.ops.launch.layout import FEW_SEGMENTS, POINTER_SOURCES, GridKind, Kind, Op, Source
from jaggedperf.ops.launch.plan import NativePlan, chunking
from jaggedperf.ops.reduce import cpu, plan

VALUES, OFFSETS, OUT, WORKSPACE = Source.VALUES, Source.OFFSETS, Source.OUT, Source.WORKSPACE
N_ROWS, N_COLS, N_SEGMENTS, NULL = Source.N_ROWS, Source.N_COLS, Source.N_SEGMENTS, Source.NULL_POINTER
ROWS_PER_CHUNK, N_CHUNKS, GRID_Z = Source.ROWS_PER_CHUNK, Source.N_CHUNKS, Source.GRID_Z
POINTER, I32, I64 = Kind.POINTER, Kind.I32, Kind.I64
SEGMENTS, CHUNKS = GridKind.SEGMENTS, GridKind.CHUNKS


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The module, built from scratch into a fresh cache (CI must build it: no compiler is a failure there)."""
    if shutil.which(native.compiler().split()[0]) is None and not os.environ.get("CI"):
        pytest.skip(f"no C++ compiler ({native.compiler()})")
    cache = tmp_path_factory.mktemp("native-cache")
    old = os.environ.get("JAGGEDPERF_CACHE")
    os.environ["JAGGEDPERF_CACHE"] = str(cache)
    try:
        path = native.build()
        assert path == native.module_path() and path.is_relative_to(cache)
        yield native._import(path)
    finally:
        if old is None:
            os.environ.pop("JAGGEDPERF_CACHE")
        else:
            os.environ["JAGGEDPERF_CACHE"] = old


@pytest.fixture(autouse=True)
def _restore_state():
    saved = dataclasses.replace(native._state, verified_functions=set(native._state.verified_functions),
                                paused=set(native._state.paused))
    yield
    native._state = saved
    native._refresh()
    launch.force_tier(None)


def _batch(n_rows=10, n_cols=8, lengths=(3, 0, 7)):
    values = torch.randn(n_rows, n_cols)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    return values, offsets


def test_key_names_everything_the_plan_depends_on(built):
    values, offsets = _batch()
    key = built.key(values, offsets, 5, True, False)
    assert key[:2] == [1, 0] and key[4:10] == [8, 5, 3, -1, 3, 1]  # mean, M, max_seqlen, B, device, aligned, int32
    assert key[11] == Op.REDUCE
    assert key != built.key(values, offsets, 5, False, False)  # the op
    assert key != built.key(values, offsets, 6, True, False)  # max_seqlen
    assert key != built.key(values, offsets.int(), 5, True, False)  # offsets dtype
    assert key != built.key(values.half(), offsets, 5, True, False)  # values dtype
    assert key != built.key(values[:, :4].contiguous(), offsets, 5, True, False)  # M
    assert key != built.key(values, offsets[:-1], 5, True, False)  # B, when max_seqlen is given
    misaligned = torch.randn(81)[1:].view(10, 8)  # 4 bytes past a 16-byte boundary
    assert key != built.key(misaligned, offsets, 5, True, False)


def test_without_max_seqlen_one_key_serves_every_batch_size_and_length(built):
    values, offsets = _batch()
    key = built.key(values, offsets, -1, True, False)
    assert key[5:7] == [-1, -1]  # the merge path takes whatever B and N come
    longer, more = _batch(n_rows=30, lengths=(3, 0, 7, 20))
    assert built.key(longer, more, -1, True, False) == key
    many, many_offsets = _batch(n_rows=60, lengths=(1,) * (FEW_SEGMENTS + 1))
    assert built.key(many, many_offsets, -1, True, False) == key


def test_one_merge_plan_serves_few_and_many_segments(built):
    # the merge path spreads one segment over every program whatever B: the same kernels and config for any B (the
    # balanced chunks' wide combine for few segments, and the key's split for it, served the chunks alone)
    plans = [plan.plan_reduce(*_meta(10_000, 64, n), mean=False, empty_zero=False) for n in (1, FEW_SEGMENTS,
                                                                                            FEW_SEGMENTS + 1, 512)]
    assert len({tuple(step.key for step in planned.launches) for planned in plans}) == 1
    assert len({planned.native_plan() for planned in plans}) == 1


def test_the_backward_has_keys_of_its_own(built):
    # expand: the (B, M) gradient in, n_rows rows out; its chunks take no wide combine, so without max_seqlen one
    # key serves every B; with it B counts (the whole-segments grid), as for the forward
    values, offsets = _batch()
    grad = torch.randn(3, 8)
    key = built.key(grad, offsets, 5, True, False, 10)
    assert key[11] == Op.EXPAND and key[4:7] == [8, 5, 3] and key != built.key(values, offsets, 5, True, False)
    assert key[:11] == built.key(grad, offsets, 5, True, False, 11)[:11]  # N is the call's, not the key's
    plain = built.key(grad, offsets, -1, False, False, 10)
    assert plain[5:7] == [-1, -1]  # 3 segments: the forward's key would say -2 (the wide combine)
    assert built.key(torch.randn(7, 8), torch.arange(8), -1, False, False, 40) == plain  # any B, any N
    assert built.key(grad, offsets, 5, True, False, 2**31)[9] == 0  # an output past int32: int64 kernels
    assert built.key(values, offsets, 5, True, False, 10) is None  # a gradient of B rows, not N
    assert built.key(grad, offsets, 5, True, True, 10) is None  # empty_zero means nothing to the backward


def test_key_refuses_what_the_path_cannot_serve(built):
    values, offsets = _batch()
    assert built.key(values.t(), offsets, -1, True, False) is None  # not contiguous
    assert built.key(values[None], offsets, -1, True, False) is None  # 3-D
    assert built.key(values, offsets[None], -1, True, False) is None  # 2-D offsets
    assert built.key(values, offsets[:0], -1, True, False) is None  # no B + 1
    assert built.key(values, offsets, -2, True, False) is None  # not a max_seqlen
    assert built.key(values, offsets, -1, True, False) is not None  # no hint


def test_pack_writes_pointers_and_narrowed_ints_in_kernel_order(built):
    values, offsets = _batch(n_rows=3, n_cols=8, lengths=(1, 2))
    out, workspace = torch.empty(2, 8), torch.empty(40)
    params = [(VALUES, POINTER), (OFFSETS, POINTER), (OUT, POINTER), (WORKSPACE, POINTER), (N_ROWS, I64),
              (N_COLS, I32), (N_SEGMENTS, I32), (ROWS_PER_CHUNK, I64), (N_CHUNKS, I32), (NULL, POINTER)]
    block = built.pack(params, values, offsets, out, workspace, 128, 5)
    slots = struct.unpack("<QQQQqiiiiqiiQ", block)
    assert slots[:4] == (values.data_ptr(), offsets.data_ptr(), out.data_ptr(), workspace.data_ptr())
    assert slots[4] == 3 and (slots[5], slots[7]) == (8, 2) and slots[9] == 128 and slots[10] == 5
    assert slots[6] == slots[8] == slots[11] == 0  # an int32's slot is zero past its 4 bytes
    assert slots[12] == 0  # a scratch pointer Triton passes as null
    assert struct.unpack("<Q", built.pack([(WORKSPACE, POINTER)], values, offsets, out, None, 0, 0))[0] == 0


def test_every_layout_source_packs(built):
    # a Source that layout.py declares and native.cpp's pack() has no case for raises here
    values, offsets = _batch(n_rows=3, n_cols=8, lengths=(1, 2))
    params = [(source, POINTER if source in POINTER_SOURCES or source == NULL else I64) for source in Source]
    block = built.pack(params, values, offsets, torch.empty(2, 8), torch.empty(40), 7, 1)
    assert len(block) == 8 * len(Source)


def test_pack_takes_the_backwards_rows_and_tiles_from_the_call(built):
    # the backward's N_ROWS is its output's rows (its values are the (B, M) gradient); GRID_Z is the plan's
    grad, offsets = torch.randn(2, 8), torch.tensor([0, 1, 3])
    block = built.pack([(N_ROWS, I64), (N_SEGMENTS, I64), (GRID_Z, I32)], grad, offsets, torch.empty(3, 8), None, 0, 0,
                       n_rows=3, grid_z=5)
    assert struct.unpack("<qqii", block) == (3, 2, 5, 0)
    assert struct.unpack("<q", built.pack([(N_ROWS, I64)], grad, offsets, grad, None, 0, 0))[0] == 2


SEGMENT_PLAN = NativePlan(block_m=8, group=2, programs=0, chunk_programs=0, block_l=0, min_chunk_rows=0)


def test_the_module_is_built_from_the_layout_header(built):
    # native.cpp's range checks are the header's counts: the last Source and Kind register, one past them do not
    kernel = (0, 1, 0, SEGMENTS, [(len(Source) - 1, I64), (0, len(Kind) - 1)])
    built.register([0] * 12, 0, kernels=[kernel], **dataclasses.asdict(SEGMENT_PLAN))
    for bad in ((len(Source), POINTER), (0, len(Kind))):
        with pytest.raises(ValueError, match="out of range"):
            built.register([0] * 12, 0, kernels=[(0, 1, 0, SEGMENTS, [bad])], **dataclasses.asdict(SEGMENT_PLAN))
    built.forget()
    assert f"constexpr int SOURCE_COUNT = {len(Source)};" in layout.header()


def _meta(n_rows, n_cols, n_segments, dtype=torch.float32):
    # shapes without memory: the production planners run on meta tensors for any N
    return (torch.empty(n_rows, n_cols, dtype=dtype, device="meta"),
            torch.empty(n_segments + 1, dtype=torch.int64, device="meta"))


@pytest.mark.parametrize("sms", [4, 132])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n_cols", [1, 8, 33, 64, 300, 4096])
@pytest.mark.parametrize("n_rows,n_segments", [(0, 0), (0, 10**6), (31, 7), (123_457, 7), (5_000_000, 1),
                                               (2**31 + 5, 10**5)])
def test_native_merge_geometry_is_the_python_plans(built, monkeypatch, n_rows, n_segments, n_cols, dtype, sms):
    # the native path redoes the merge path's split per call in C++ (geometry_of over N + B units): the Python plan's
    monkeypatch.setattr(plan, "sm_count", lambda device: sms)
    planned = plan.plan_reduce(*_meta(n_rows, n_cols, n_segments, dtype), mean=True, empty_zero=False)
    grids = planned.native_plan()
    assert grids.units == 1 and grids.chunk_programs == sms * config.merge_config(n_cols, dtype).programs_per_sm
    got = built.geometry(**dataclasses.asdict(grids), grid_kinds=[step.native.grid for step in planned.launches],
                         n_rows=n_rows, n_cols=n_cols, n_segments=n_segments)
    units, programs = planned.launches[0].args[6:8]
    assert got == (units, programs, [step.grid for step in planned.launches])
    assert [step.native for step in planned.launches] == [plan.MERGE_NATIVE, plan.MERGE_COMBINE_NATIVE]


@pytest.mark.parametrize("n_rows", [0, 1000, 5_000_000])
def test_native_chunk_geometry_is_the_python_plans(built, n_rows):
    # the balanced chunks (routed where max_seqlen is known and long) keep their native geometry
    values, offsets = _meta(n_rows, 64, 7)
    cfg = config.reduce_config(64, torch.float32, values.device)
    programs = config.sm_count(values.device) * cfg.programs_per_sm
    rows, chunks = chunking(n_rows, 1, programs, cfg.block_l, cfg.min_chunk_rows)
    planned = plan.plan_chunks(values, offsets, True, False, cfg, rows, chunks, programs)
    got = built.geometry(**dataclasses.asdict(planned.native_plan()), grid_kinds=[CHUNKS, CHUNKS], n_rows=n_rows,
                         n_cols=64, n_segments=7)
    assert got == (rows, chunks, [step.grid for step in planned.launches])


@pytest.mark.parametrize("n_segments", [4, 7, 512, 65536])
@pytest.mark.parametrize("n_cols,max_seqlen", [(1, 40), (16, 64), (64, 100), (64, 500), (300, 40)])
def test_native_segment_geometry_is_the_python_plans(built, n_segments, n_cols, max_seqlen):
    planned = plan.plan_reduce(*_meta(n_segments * max_seqlen // 2, n_cols, n_segments), mean=False,
                               empty_zero=False, max_seqlen=max_seqlen)
    assert planned.launches[0].native == plan.SEGMENTS_NATIVE
    got = built.geometry(**dataclasses.asdict(planned.native_plan()), grid_kinds=[SEGMENTS],
                         n_rows=planned.launches[0].args[3], n_cols=n_cols, n_segments=n_segments)
    assert got[2] == [planned.launches[0].grid]


@pytest.mark.parametrize("sms", [4, 132])
@pytest.mark.parametrize("n_cols", [1, 33, 64, 4096])
@pytest.mark.parametrize("n_rows", [0, 1, 1000, 5_000_000, 2**31 + 5])
def test_native_geometry_of_the_backwards_merge_is_the_python_plans(built, monkeypatch, n_rows, n_cols, sms):
    monkeypatch.setattr(plan, "sm_count", lambda device: sms)
    grad, offsets = _meta(7, n_cols, 7)
    planned = plan.plan_expand(grad, offsets, n_rows, mean=True)
    assert [step.native for step in planned.launches] == [plan.MERGE_EXPAND_NATIVE]
    got = built.geometry(**dataclasses.asdict(planned.native_plan()), grid_kinds=[CHUNKS], n_rows=n_rows,
                         n_cols=n_cols, n_segments=7)
    assert got == (planned.launches[0].args[5], planned.launches[0].grid[0], [planned.launches[0].grid])


@pytest.mark.parametrize("n_segments", [4, 512, 65536])  # (one segment takes the chunks, with or without max_seqlen)
@pytest.mark.parametrize("n_cols,max_seqlen", [(1, 40), (16, 64), (64, 100), (64, 500), (300, 40), (8, 2000)])
def test_native_geometry_of_the_backwards_segments_is_the_python_plans(built, n_segments, n_cols, max_seqlen):
    # the whole-segments backward: grid axis 2 spreads a long segment alone in its program over tiles (GRID_Z)
    grad, offsets = _meta(n_segments, n_cols, n_segments)
    planned = plan.plan_expand(grad, offsets, n_segments * max_seqlen // 2, mean=False, max_seqlen=max_seqlen)
    step = planned.launches[0]
    assert step.native == plan.SEGMENTS_EXPAND_NATIVE and planned.native_plan().grid_z == step.grid[2] == step.args[6]
    got = built.geometry(**dataclasses.asdict(planned.native_plan()), grid_kinds=[SEGMENTS], n_rows=step.args[3],
                         n_cols=n_cols, n_segments=n_segments)
    assert got[2] == [step.grid]


def test_some_backward_segments_plan_spreads_over_tiles():
    # the case the GRID_Z source exists for: one segment a program, longer than its tile
    planned = plan.plan_expand(*_meta(4, 8, 4), 8000, mean=False, max_seqlen=2000)
    assert planned.native_plan().grid_z == planned.launches[0].grid[2] > 1


@given(n_rows=st.integers(0, 2**40), col_blocks=st.integers(1, 64), chunk_programs=st.integers(1, 10**5),
       block_l=st.sampled_from([1, 8, 16, 32, 64, 128]), min_tiles=st.integers(1, 16))
def test_chunking_is_native_geometry_of(built, n_rows, col_blocks, chunk_programs, block_l, min_tiles):
    # launch.plan.chunking (Python) and geometry_of (C++) are one arithmetic written twice: a divergence fails here
    grids = NativePlan(block_m=16, group=0, programs=0, chunk_programs=chunk_programs, block_l=block_l,
                       min_chunk_rows=min_tiles * block_l)
    rows, chunks = chunking(n_rows, col_blocks, chunk_programs, block_l, grids.min_chunk_rows)
    got = built.geometry(**dataclasses.asdict(grids), grid_kinds=[CHUNKS], n_rows=n_rows, n_cols=col_blocks * 16,
                         n_segments=3)
    assert got == (rows, chunks, [(chunks, col_blocks, 1)])
    # the merge path's units: the same arithmetic over N + B
    merged = dataclasses.replace(grids, units=1)
    units, programs = chunking(n_rows + 3, col_blocks, chunk_programs, block_l, grids.min_chunk_rows)
    assert built.geometry(**dataclasses.asdict(merged), grid_kinds=[CHUNKS], n_rows=n_rows, n_cols=col_blocks * 16,
                          n_segments=3) == (units, programs, [(programs, col_blocks, 1)])


def test_segment_grid_from_group_or_fixed_programs(built):
    assert built.geometry(16, 2, 0, 0, 0, 0, [SEGMENTS], 9, 33, 9)[2] == [(5, 3, 1)]
    assert built.geometry(64, 0, 7, 0, 0, 0, [SEGMENTS], 9, 33, 9)[2] == [(7, 1, 1)]
    assert built.geometry(4, 8, 0, 0, 0, 0, [SEGMENTS], 0, 4, 0)[2] == [(1, 1, 1)]  # B = 0: one program
    with pytest.raises(ValueError):
        built.geometry(4, 0, 0, 0, 0, 0, [SEGMENTS], 9, 33, 9)  # neither a group nor programs
    with pytest.raises(ValueError):
        built.geometry(4, 1, 0, 0, 0, 0, [CHUNKS], 9, 33, 9)  # a chunks kernel with no chunking


def test_reduce_and_launch_leave_cpu_tensors_and_unknown_keys_alone(built):
    values, offsets = _batch()
    built.forget()
    native.register(built, built.key(values, offsets, -1, True, False), 0, SEGMENT_PLAN,
                    [(0, 1, 0, SEGMENTS, [(VALUES, POINTER)])])
    assert built.size() == 1 and built.has(built.key(values, offsets, -1, True, False))
    assert built.reduce(values, offsets, -1, True, False) is None  # CPU tensors: never launched
    with pytest.raises(ValueError):
        built.launch([0] * 12, values, offsets, torch.empty(3, 8))
    built.forget()
    assert built.size() == 0


def _compiled(signature: dict, **metadata):
    meta = dict(num_warps=4, shared=0, num_ctas=1, launch_cooperative_grid=False, launch_pdl=False,
                global_scratch_size=0, profile_scratch_size=0)
    meta.update(metadata)
    return SimpleNamespace(src=SimpleNamespace(signature=signature), metadata=SimpleNamespace(**meta), function=1234)


NAMES = ("values_ptr", "offsets_ptr", "out_ptr", "n_rows", "n_cols", "n_segments", "MEAN", "GROUP")
SIGNATURE = {"values_ptr": "*fp32", "offsets_ptr": "*i64", "out_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
             "n_segments": "i64", "MEAN": "constexpr", "GROUP": "constexpr"}


def test_parameters_follow_the_compiled_signature():
    params = native.parameters(_compiled(SIGNATURE), NAMES, plan.SEGMENTS_NATIVE.sources)
    assert params == [(VALUES, POINTER), (OFFSETS, POINTER), (OUT, POINTER), (N_ROWS, I32), (N_COLS, I32),
                      (N_SEGMENTS, I64), (NULL, POINTER), (NULL, POINTER)]
    specialised = dict(SIGNATURE, n_cols="constexpr")  # M == 1: the JIT makes it a constant
    assert native.parameters(_compiled(specialised), NAMES, plan.SEGMENTS_NATIVE.sources)[3:5] == [(N_ROWS, I32),
                                                                                            (N_SEGMENTS, I64)]


def test_parameters_of_the_combine_kernel():
    names = ("offsets_ptr", "out_ptr", "ws_ptr", "n_cols", "rows_per_chunk", "n_chunks", "MEAN")
    signature = {"offsets_ptr": "*i32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "n_cols": "i32",
                 "rows_per_chunk": "i32", "n_chunks": "i32", "MEAN": "constexpr"}
    assert native.parameters(_compiled(signature), names, plan.COMBINE_NATIVE.sources) == [
        (OFFSETS, POINTER), (OUT, POINTER), (WORKSPACE, POINTER), (N_COLS, I32), (ROWS_PER_CHUNK, I32),
        (N_CHUNKS, I32), (NULL, POINTER), (NULL, POINTER)]
    swapped = dict(signature, n_cols="*fp32")  # a pointer where the source is an integer
    assert native.parameters(_compiled(swapped), names, plan.COMBINE_NATIVE.sources) is None


@pytest.mark.parametrize("change", [
    {"signature": dict(SIGNATURE, n_rows="fp32")},  # a type the path does not pack
    {"signature": dict(SIGNATURE, GROUP="i32")},  # a runtime argument with no source
    {"global_scratch_size": 128}, {"profile_scratch_size": 8}, {"num_ctas": 2}, {"launch_pdl": True},
    {"launch_cooperative_grid": True},
])
def test_parameters_refuse_what_the_launcher_would_do_differently(change):
    signature = change.pop("signature", SIGNATURE)
    assert native.parameters(_compiled(signature, **change), NAMES, plan.SEGMENTS_NATIVE.sources) is None


class FakeModule:
    """Stands in for the built module: launch() writes what ``write`` says into the output."""

    def __init__(self, write):
        self.write, self.plans, self.served_calls, self.hints = write, {}, 0, []

    def key(self, values, offsets, max_seqlen, mean, empty_zero, n_rows=-1):
        return [int(mean), max_seqlen, values.shape[1]] + ([n_rows] if n_rows >= 0 else [])

    def register(self, key, device, block_m, group, programs, chunk_programs, block_l, min_chunk_rows, grid_z, units,
                 kernels):
        self.plans[tuple(key)] = (block_m, group, programs, chunk_programs, kernels)

    def launch(self, key, values, offsets, out):
        self.write(out)

    def forget(self):
        self.plans.clear()

    def has(self, key):
        return tuple(key) in self.plans

    def size(self):
        return len(self.plans)

    def served(self):
        return self.served_calls

    def served_expand(self):
        return 0

    def expand(self, grad, offsets, n_rows, max_seqlen, mean):
        self.hints.append(("expand", n_rows, max_seqlen, mean))
        return torch.full((n_rows, grad.shape[1]), 7.0)

    def reduce(self, values, offsets, max_seqlen, mean, empty_zero):
        self.hints.append(max_seqlen)
        if max_seqlen < -1:  # the real key() refuses it (test_key_refuses_what_the_path_cannot_serve)
            return None
        self.served_calls += 1
        return "native output"


def _ready(module):
    native._state = native._State(status="ready", module=module)
    native._refresh()


PLAN = SEGMENT_PLAN
KERNELS = [native.OfferedKernel(_compiled(SIGNATURE), NAMES, plan.SEGMENTS_NATIVE)]


def test_offer_registers_after_a_matching_first_launch():
    values, offsets = _batch()
    out = torch.randn(3, 8)
    fake = FakeModule(lambda trial: trial.copy_(out))
    _ready(fake)
    native.offer(values, offsets, 7, True, False, PLAN, KERNELS, out)
    assert list(fake.plans) == [(1, 7, 8)] and fake.plans[(1, 7, 8)][:4] == (8, 2, 0, 0)
    assert fake.plans[(1, 7, 8)][4] == [(1234, 4, 0, 0, native.parameters(_compiled(SIGNATURE), NAMES,
                                                                             plan.SEGMENTS_NATIVE.sources))]
    assert native.state()["verified_kernels"] == 1 and native.active is fake


def test_offer_disables_the_path_when_the_first_launch_differs():
    values, offsets = _batch()
    out = torch.randn(3, 8)
    fake = FakeModule(lambda trial: trial.copy_(out).view(-1)[5].add_(1))
    _ready(fake)
    native.offer(values, offsets, 7, True, False, PLAN, KERNELS, out)
    assert native.active is None and fake.plans == {}
    assert native.state()["status"] == "disabled" and "differs" in native.state()["reason"]


def test_offer_proves_nothing_on_an_empty_output():
    values, offsets = torch.empty(0, 8), torch.zeros(1, dtype=torch.int64)
    fake = FakeModule(lambda trial: None)
    _ready(fake)
    native.offer(values, offsets, None, False, False, PLAN, KERNELS, torch.empty(0, 8))
    assert fake.plans == {} and native.active is fake and native.state()["verified_kernels"] == 0


def test_offer_skips_kernels_it_cannot_pack():
    values, offsets = _batch()
    fake = FakeModule(lambda trial: pytest.fail("must not launch"))
    _ready(fake)
    kernels = [dataclasses.replace(KERNELS[0], compiled=_compiled(SIGNATURE, num_ctas=2))]
    native.offer(values, offsets, 7, True, False, PLAN, kernels, torch.randn(3, 8))
    assert fake.plans == {} and native.active is fake


def test_offer_keys_a_backward_by_its_output_rows():
    grad, offsets = torch.randn(3, 8), torch.tensor([0, 3, 3, 10])
    out = torch.randn(10, 8)
    fake = FakeModule(lambda trial: trial.copy_(out))
    _ready(fake)
    native.offer(grad, offsets, None, False, False, PLAN, KERNELS, out, n_rows=10)
    assert list(fake.plans) == [(0, -1, 8, 10)]


def test_the_eager_backward_takes_the_native_call_first():
    # api.EagerReduce (CUDA's eager autograd; applied here on the CPU): its backward asks the native path first
    from jaggedperf.ops.reduce.api import EagerReduce

    values, offsets = _batch()
    fake = FakeModule(None)
    fake.reduce = lambda *args: torch.zeros(3, 8)  # the forward, served
    _ready(fake)
    leaf = values.clone().requires_grad_(True)
    EagerReduce.apply(leaf, offsets, 7, True, False).sum().backward()
    assert fake.hints == [("expand", 10, 7, True)] and torch.equal(leaf.grad, torch.full((10, 8), 7.0))


def test_public_functions_take_the_native_call_first_and_fall_back_on_none():
    values, offsets = _batch()
    fake = FakeModule(None)
    _ready(fake)
    assert jaggedperf.jagged_mean(values, offsets, max_seqlen=7) == "native output"
    assert jaggedperf.jagged_sum(values, offsets) == "native output"
    assert fake.served_calls == 2
    fake.reduce = lambda *args: None  # no plan: the Python path (the CPU kernel here)
    torch.testing.assert_close(jaggedperf.jagged_sum(values, offsets), cpu.reduce_checked(values, offsets, False, False))


@pytest.mark.parametrize("how", ["validate", "env", "forced tier", "nested", "bad max_seqlen"])
def test_native_call_is_skipped_where_the_python_path_must_run(how, monkeypatch):
    values, offsets = _batch()
    fake = FakeModule(None)
    _ready(fake)
    kwargs = {}
    if how == "validate":
        kwargs["validate"] = True
    elif how == "env":
        monkeypatch.setenv("JAGGEDPERF_VALIDATE", "1")
    elif how == "forced tier":
        launch.force_tier("jit")
    elif how == "nested":  # the native call is tried once its values and offsets are unpacked (the CPU: no plan)
        values = torch.nested.nested_tensor_from_jagged(values, offsets)
        offsets = None
        fake.reduce = lambda *args: fake.hints.append(args[2])
    if how == "bad max_seqlen":
        for bad in (-1, 2.0, "7", 2**70):
            with pytest.raises(ValueError, match="max_seqlen"):
                jaggedperf.jagged_mean(values, offsets, max_seqlen=bad)
        assert fake.hints == [-2, -2, -2, -2]
    else:
        assert isinstance(jaggedperf.jagged_mean(values, offsets, **kwargs), torch.Tensor)
    assert fake.served_calls == 0
    assert fake.hints == ([-1] if how == "nested" else [-2] * 4 if how == "bad max_seqlen" else [])


def test_compiled_callers_never_reach_the_native_call():
    values, offsets = _batch()
    fake = FakeModule(None)
    _ready(fake)
    compiled = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o, max_seqlen=7), fullgraph=True)
    torch.testing.assert_close(compiled(values, offsets), cpu.reduce_checked(values, offsets, True, False),
                               equal_nan=True)
    assert fake.served_calls == 0


def test_a_failed_build_leaves_the_python_path(monkeypatch, tmp_path):
    monkeypatch.setenv("JAGGEDPERF_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that always fails
    native._state = native._State()
    state = native.ensure()
    assert state["status"] == "failed" and "building native.cpp failed" in state["reason"]
    assert native.active is None and not list(tmp_path.rglob("*.so"))


def test_native_off_by_environment(monkeypatch):
    monkeypatch.setenv("JAGGEDPERF_NATIVE", "0")
    native._state = native._State()
    assert native.ensure()["status"] == "off" and native.active is None and not native.offering()


def test_launch_path_reports_the_native_path_and_force_tier_and_overrides_pause_it():
    fake = FakeModule(None)
    _ready(fake)
    launch.force_tier("launch")
    assert native.active is None and launch.launch_path()["native"]["paused"] == ["force_tier"]
    with config.override(block_l=8):
        assert native.state()["paused"] == ["config override", "force_tier"] and not native.offering()
        launch.force_tier(None)
        assert native.active is None
    assert native.active is fake and launch.launch_path()["native"]["status"] == "ready"
