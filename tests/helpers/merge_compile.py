"""The merge-path and split kernels compiled for sm_90 without a GPU (the installed Triton's compiler, ptxas and
cuobjdump), at their production configs: what the compiled code must keep for the H200 to run them near the bandwidth
floor.

Run as a script (TRITON_INTERPRET unset): prints one JSON object, ``{"kernel/dtype/M/op": {...}}`` with, per kernel,
its registers a lane and the programs an SM they leave, its local-memory bytes (spills), whether its PTX has 128-bit
global loads (stores for the backward), and the longest run of 128-bit loads the SASS issues before any add, store or
branch (the loads of a tile in flight together). Used by tests/ops/test_merge_compile.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from helpers.aot_compile import compile_one
from helpers.rowwise_registers import programs_per_sm

from jaggedperf.ops.config import merge_config, merge_expand_config, split_config
from jaggedperf.ops.reduce import merge, split
from jaggedperf.ops.reduce.plan import split_constexprs

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
# (M, dtype): the narrow bucket with its flat window, the mid one, the wide one (several column blocks), bf16 mid and
# wide, odd M (masked columns: more registers) narrow in fp32 and mid in bf16
CASES = [(8, "fp32"), (64, "fp32"), (1000, "fp32"), (64, "bf16"), (256, "bf16"), (5, "fp32"), (17, "bf16")]
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# what ends a run of loads: the first use of loaded data (an add), a store, a branch, a barrier or a shuffle
RUN_ENDS = {"FADD", "HADD2", "STG", "BRA", "BAR", "SHFL"}


def _cuobjdump(cubin: bytes, *flags: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        return subprocess.run([CUOBJDUMP, *flags, handle.name], capture_output=True, text=True, check=True).stdout


def longest_load_run(sass: str) -> int:
    """The most 128-bit global loads issued one after another before an add, a store, a branch or a barrier."""
    best = run = 0
    for line in sass.splitlines():
        found = re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T\d]\s+)?([A-Z0-9_]+)((?:\.[A-Z0-9_]+)*)", line)
        if not found:
            continue
        op, modifiers = found.group(1), found.group(2)
        if op == "LDG" and ".128" in modifiers:
            run += 1
            best = max(best, run)
        elif op in RUN_ENDS:
            run = 0
    return best


def describe(compiled, num_warps: int, stores: bool) -> dict:
    usage = next(line for line in _cuobjdump(compiled.asm["cubin"], "--dump-resource-usage").splitlines()
                 if "REG:" in line)
    registers = int(usage.split("REG:")[1].split()[0])
    local = int(usage.split("LOCAL:")[1].split()[0]) if "LOCAL:" in usage else 0
    ptx = compiled.asm["ptx"]
    vector = any(access in ptx for access in (("st.global.v4",) if stores else ("ld.global.v4", "ld.global.nc.v4")))
    return {"registers": registers, "programs_per_sm": programs_per_sm(registers, num_warps), "local_bytes": local,
            "vector": vector, "load_run": longest_load_run(_cuobjdump(compiled.asm["cubin"], "-sass"))}


def _tile_constexprs(cfg, window: int) -> dict:
    """A merge-path kernel's tile arguments from its config, with the window its kernel takes (the forward's or the
    backward's)."""
    return {"BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m, "WINDOW": window, "GROUP": cfg.group,
            "SEG_ROWS": cfg.seg_rows, "SEG_TILES": cfg.seg_tiles, "SEARCH": cfg.search}


def main() -> int:
    found: dict = {}
    for n_cols, dt in CASES:
        cfg = merge_config(n_cols, TORCH_DTYPES[dt])
        ptr = f"*{dt}"
        tiles = _tile_constexprs(cfg, cfg.window)
        sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, "ws_ptr": "*fp32", "n_rows": "i32",
               "n_segments": "i32", "units_per_program": "i32", "n_programs": "i32", "N_COLS": "constexpr",
               "MEAN": "constexpr", "EMPTY_ZERO": "constexpr", **{name: "constexpr" for name in tiles}}
        for mean in (False, True) if n_cols == 64 and dt == "fp32" else (False,):
            constexprs = {"N_COLS": n_cols, "MEAN": mean, "EMPTY_ZERO": False, **tiles}
            compiled = compile_one(merge._merge_reduce_kernel, sig, constexprs, (0, 1, 2, 3), cfg.num_warps)
            found[f"reduce/{dt}/{n_cols}/{'mean' if mean else 'sum'}"] = {
                **describe(compiled, cfg.num_warps, stores=False), "aim": cfg.programs_per_sm,
                "loads_a_tile": cfg.block_l * cfg.block_m // (32 * cfg.num_warps) // (16 // (4 if dt == "fp32" else 2))}
        # the backward's own tiles (config.MERGE_EXPAND_TILES), as production launches it
        ecfg = merge_expand_config(n_cols, TORCH_DTYPES[dt])
        expand_tiles = _tile_constexprs(ecfg, ecfg.expand_window)
        esig = {"grad_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, "n_rows": "i32", "n_segments": "i32",
                "units_per_program": "i32", "N_COLS": "constexpr", "MEAN": "constexpr",
                **{name: "constexpr" for name in expand_tiles}}
        compiled = compile_one(merge._merge_expand_kernel, esig, {"N_COLS": n_cols, "MEAN": True, **expand_tiles},
                               (0, 1, 2), ecfg.num_warps)
        found[f"expand/{dt}/{n_cols}/mean"] = {**describe(compiled, ecfg.num_warps, stores=True),
                                               "aim": ecfg.programs_per_sm}
    sig = {"offsets_ptr": "*i64", "out_ptr": "*fp32", "ws_ptr": "*fp32", "units_per_program": "i32",
           "n_programs": "i32", "N_COLS": "constexpr", "MEAN": "constexpr", "EMPTY_ZERO": "constexpr",
           "BLOCK_P": "constexpr", "BLOCK_M": "constexpr"}
    for n_cols in (64, 4):  # (M = 4: the narrow bucket's 2048 pieces a step beside the one-step case's 16)
        cfg = merge_config(n_cols, torch.float32)
        constexprs = {"N_COLS": n_cols, "MEAN": True, "EMPTY_ZERO": False, "BLOCK_P": cfg.block_p,
                      "BLOCK_M": cfg.block_m}
        compiled = compile_one(merge._merge_combine_kernel, sig, constexprs, (0, 1, 2), cfg.combine_warps)
        found[f"combine/fp32/{n_cols}/mean"] = {**describe(compiled, cfg.combine_warps, stores=False), "aim": 1}
    # Inductor may pass an int argument equal to 1 as a constant: the kernels must compile that way too
    for name in ("n_programs", "units_per_program"):
        compile_one(merge._merge_combine_kernel, {**sig, name: "constexpr"}, {**constexprs, name: 1}, (0, 1, 2),
                    cfg.combine_warps)
    split_kernels(found)
    print(f"triton {triton.__version__}")  # the compiler used (the tests ask for the GPU box's by PYTHONPATH)
    print(json.dumps(found))
    return 0


# (M, dtype, ops) of the split kernels: the narrow bucket (five options of rows per segment: the most code), the mid
# one, bf16 (the half-width vectors). Each cold compile takes ~10 s on a 2-core CI machine (the kernel holds every
# option's whole-segments loop and the long role): the mean (one divide more) and the wide rows are left out.
SPLIT_CASES = [(8, "fp32", ("sum",)), (64, "fp32", ("sum",)), (64, "bf16", ("sum",))]
SPLIT_NAMES = ("BLOCK_M", "WINDOW", "GROUP", "SEG_ROWS", "SEG_TILES", "SEARCH", "TILE", "TILES", "ROWS_CAP", "N_OPTS")


def split_kernels(found: dict) -> None:
    """The split kernels at their production configs: ``split/...`` (forward) and ``split_expand/...``, each with the
    programs an SM its two roles aim at together (``aim``) and the 128-bit loads of a long-role tile a lane
    (``loads_a_tile``)."""
    for n_cols, dt, ops in SPLIT_CASES:
        cfg = split_config(n_cols, TORCH_DTYPES[dt])
        ptr = f"*{dt}"
        tiles = dict(zip(SPLIT_NAMES, split_constexprs(cfg)))
        vector_elements = 16 // (4 if dt == "fp32" else 2)
        aim = {"aim": 2 * cfg.programs_per_sm,
               "loads_a_tile": cfg.block_l * cfg.block_m // (32 * cfg.num_warps) // vector_elements}
        sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, "ws_ptr": "*fp32", "n_rows": "i32",
               "n_segments": "i32", "units_per_program": "i32", "n_programs": "i32", "N_COLS": "constexpr",
               "MEAN": "constexpr", "EMPTY_ZERO": "constexpr", "BLOCK_L": "constexpr",
               **{name: "constexpr" for name in tiles}}
        for op in ops:
            constexprs = {"N_COLS": n_cols, "MEAN": op == "mean", "EMPTY_ZERO": False, "BLOCK_L": cfg.block_l, **tiles}
            compiled = compile_one(split._split_reduce_kernel, sig, constexprs, (0, 1, 2, 3), cfg.num_warps)
            found[f"split/{dt}/{n_cols}/{op}"] = {**describe(compiled, cfg.num_warps, stores=False), **aim}
        if n_cols == 64 and dt == "fp32":
            esig = {"grad_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, "n_rows": "i32", "n_segments": "i32",
                    "units_per_program": "i32", "N_COLS": "constexpr", "MEAN": "constexpr", "BLOCK_L": "constexpr",
                    **{name: "constexpr" for name in tiles}}
            constexprs = {"N_COLS": n_cols, "MEAN": True, "BLOCK_L": cfg.block_l, **tiles, "WINDOW": cfg.expand_window}
            compiled = compile_one(split._split_expand_kernel, esig, constexprs, (0, 1, 2), cfg.num_warps)
            found[f"split_expand/{dt}/{n_cols}/mean"] = {**describe(compiled, cfg.num_warps, stores=True), **aim}


if __name__ == "__main__":
    sys.exit(main())
