"""Registers a thread of the row-wise families' kernels compiled for sm_90 at their production tiles (no GPU: the
installed Triton's compiler and its ``cuobjdump``), and the programs an SM that leaves.

Run as a script (TRITON_INTERPRET unset): prints one JSON object, ``{"kernel/dtype/tile": [registers, programs an
SM], ...}``. Used by test_rowwise_registers.py: a kernel's registers are the most that any of its branches needs, so
a pass compiled into a kernel where it never runs still costs every program its occupancy
(docs/performance.md, the model's point 9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import triton
from helpers.aot_compile import compile_one

from jaggedperf.ops.layer_norm import kernels as ln
from jaggedperf.ops.layer_norm.plan import parts_tile
from jaggedperf.ops.softmax import kernels as sm
from jaggedperf.ops.tiles import LEAN, WIDE, tile_config

REGISTERS_PER_SM = 65536  # sm_90
THREADS_PER_SM = 2048
SHAPE = {"n_rows": "i32", "n_cols": "i32", "n_segments": "i32", "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}


def registers(kernel) -> int:
    """Registers a thread of a compiled kernel (``cuobjdump --dump-resource-usage`` of its cubin)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([tool, "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
    line = next(entry for entry in usage.splitlines() if "REG:" in entry)
    return int(line.split("REG:")[1].split()[0])


def programs_per_sm(regs: int, num_warps: int) -> int:
    """Programs of ``num_warps`` warps resident on one SM at ``regs`` registers a thread (allocated by 8)."""
    threads = 32 * num_warps
    return min(REGISTERS_PER_SM // (-(-regs // 8) * 8 * threads), THREADS_PER_SM // threads)


def measure(name: str, fn, sig: dict, constexprs: dict, aligned: tuple, num_warps: int, out: dict) -> None:
    regs = registers(compile_one(fn, sig, constexprs, aligned, num_warps))
    out[name] = [regs, programs_per_sm(regs, num_warps)]


def main() -> int:
    found: dict = {}
    for dt in ("fp32", "bf16"):
        ptr = f"*{dt}"
        for M, longest in ((64, 100), (4096, 4000)):  # narrow rows (64 × 64 lean, 128 × 64 wide), wide ones (16 / 32 × 256)
            for budget_name, budget in (("lean", LEAN), ("wide", WIDE)):
                cfg = tile_config(M, longest, budget)
                tile = f"{cfg.block_l}x{cfg.block_m}/{cfg.num_warps}"
                shape = {"BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m}
                sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, **SHAPE, "PER_ELEMENT": "constexpr"}
                for per_element in (False, True):
                    measure(f"softmax/{'per_element' if per_element else 'per_column'}/{dt}/{tile}", sm._softmax_kernel,
                            sig, {**shape, "PER_ELEMENT": per_element}, (0, 1, 2, 4), cfg.num_warps, found)
                sig = {"out_ptr": ptr, "grad_ptr": ptr, "offsets_ptr": "*i64", "grad_values_ptr": ptr, **SHAPE}
                measure(f"softmax_backward/{dt}/{tile}", sm._softmax_backward_kernel, sig, shape, (0, 1, 2, 3, 5),
                        cfg.num_warps, found)
                sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "out_ptr": ptr, "eps": "fp32", **SHAPE}
                measure(f"layer_norm/{dt}/{tile}", ln._layer_norm_kernel, sig, shape, (0, 1, 2, 5), cfg.num_warps,
                        found)
                sig = {"values_ptr": ptr, "grad_ptr": ptr, "offsets_ptr": "*i64", "grad_values_ptr": ptr,
                       "eps": "fp32", **SHAPE}
                measure(f"layer_norm_backward/{dt}/{tile}", ln._layer_norm_backward_kernel, sig, shape,
                        (0, 1, 2, 3, 6), cfg.num_warps, found)
            cfg = tile_config(M, longest, LEAN)  # softmax's split takes the lean tile
            tile = f"{cfg.block_l}x{cfg.block_m}/{cfg.num_warps}"
            parts = {"BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m, "PARTS": 4}
            sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "ws_ptr": "*fp32", **SHAPE, "PARTS": "constexpr",
                   "PER_ELEMENT": "constexpr"}
            measure(f"softmax_stats/per_element/{dt}/{tile}", sm._softmax_stats_kernel, sig,
                    {**parts, "PER_ELEMENT": True}, (0, 1, 2, 4), cfg.num_warps, found)
            sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "ws_ptr": "*fp32", "out_ptr": ptr, **SHAPE,
                   "PARTS": "constexpr"}
            measure(f"softmax_parts/{dt}/{tile}", sm._softmax_parts_kernel, sig, parts, (0, 1, 2, 3, 5),
                    cfg.num_warps, found)
            cfg = parts_tile(M, longest)  # the layer norm's split
            tile = f"{cfg.block_l}x{cfg.block_m}/{cfg.num_warps}"
            parts = {"BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m, "PARTS": 4}
            sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "ws_ptr": "*fp32", **SHAPE, "PARTS": "constexpr"}
            measure(f"ln_moments/{dt}/{tile}", ln._layer_norm_moments_kernel, sig, parts, (0, 1, 2, 4),
                    cfg.num_warps, found)
            sig = {"values_ptr": ptr, "offsets_ptr": "*i64", "ws_ptr": "*fp32", "out_ptr": ptr, "eps": "fp32",
                   **SHAPE, "PARTS": "constexpr"}
            measure(f"ln_parts/{dt}/{tile}", ln._layer_norm_parts_kernel, sig, parts, (0, 1, 2, 3, 6),
                    cfg.num_warps, found)
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
