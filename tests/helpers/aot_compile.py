"""Compile the ops' Triton kernels for sm_90 without a GPU (the real compiler, not the interpreter).

Run as a script (TRITON_INTERPRET unset): prints one line per kernel, exits non-zero on failure.
Used by test_aot_compile.py so CPU CI catches what only the compiler rejects (types in loops, ...).
"""

import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from jaggedperf.ops import config
from jaggedperf.ops.reduce import kernels

TARGET = GPUTarget("cuda", 90, 32)
ALIGNED = [["tt.divisibility", 16]]


def vector_loads(k) -> bool:
    """Whether the compiled kernel ``k`` has 128-bit global loads (cached or not)."""
    return "ld.global.v4" in k.asm["ptx"] or "ld.global.nc.v4" in k.asm["ptx"]


def segments_signature(vdt: str, odt: str) -> dict:
    """The whole-segments forward kernels' signature for values of ``vdt`` and offsets of ``odt``."""
    return {"values_ptr": f"*{vdt}", "offsets_ptr": f"*{odt}", "out_ptr": f"*{vdt}", "n_rows": "i32",
            "N_COLS": "constexpr", "n_segments": "i32", "MEAN": "constexpr", "EMPTY_ZERO": "constexpr",
            "GROUP": "constexpr", "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}


def compile_one(fn, signature, constexprs, aligned, num_warps):
    attrs = {(i,): ALIGNED for i in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps})


def main() -> int:
    import torch

    for vdt, odt, dtype, M in [("fp32", "i64", torch.float32, 64), ("bf16", "i32", torch.bfloat16, 256),
                               ("fp16", "i64", torch.float16, 16)]:
        cfg = config.reduce_config(M, dtype, torch.device("cpu"))
        sig = {"values_ptr": f"*{vdt}", "offsets_ptr": f"*{odt}", "out_ptr": f"*{vdt}", "ws_ptr": "*fp32",
               "n_rows": "i32", "n_cols": "i32", "n_segments": "i32", "rows_per_chunk": "i32", "n_chunks": "i32",
               "MEAN": "constexpr", "EMPTY_ZERO": "constexpr", "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}
        k = compile_one(kernels._reduce_kernel, sig, {"MEAN": True, "EMPTY_ZERO": False,
                                                     "BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m},
                        (0, 1, 2, 3, 5), cfg.num_warps)
        vector = vector_loads(k)
        print(f"reduce {vdt} {odt} M={M}: cubin {len(k.asm['cubin'])} B, 128-bit loads {vector}")
        if not vector:
            return 2
        sig = {"offsets_ptr": f"*{odt}", "out_ptr": f"*{vdt}", "ws_ptr": "*fp32", "n_cols": "i32",
               "rows_per_chunk": "i32", "n_chunks": "i32", "MEAN": "constexpr", "EMPTY_ZERO": "constexpr",
               "BLOCK_P": "constexpr", "BLOCK_M": "constexpr"}
        compile_one(kernels._combine_kernel, sig, {"MEAN": True, "EMPTY_ZERO": True, "BLOCK_P": cfg.block_p,
                                                  "BLOCK_M": cfg.block_m}, (0, 1, 2, 3), cfg.num_warps)
        print(f"combine {vdt} {odt}: ok")
        sig = {"grad_ptr": f"*{vdt}", "offsets_ptr": f"*{odt}", "out_ptr": f"*{vdt}", "n_rows": "i64",
               "n_cols": "i32", "n_segments": "i32", "rows_per_chunk": "i64", "MEAN": "constexpr",
               "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}
        compile_one(kernels._expand_kernel, sig, {"MEAN": False, "BLOCK_L": cfg.block_l, "BLOCK_M": cfg.block_m},
                    (0, 1, 2, 4), cfg.num_warps)
        print(f"expand {vdt} {odt} (i64 rows): ok")
        sig = segments_signature(vdt, odt)
        for max_seqlen in (64, 100, 500):
            seg = config.segments_config(M, max_seqlen, 65536, torch.device("cpu"))
            if seg is None:  # too long for whole segments at this width: the chunked kernels run
                continue
            k = compile_one(kernels._segments_kernel, sig, {"N_COLS": M, "MEAN": True, "EMPTY_ZERO": True,
                                                           "GROUP": seg.group, "BLOCK_L": seg.block_l,
                                                           "BLOCK_M": seg.block_m}, (0, 1, 2), seg.num_warps)
            vector = vector_loads(k)
            print(f"segments {vdt} {odt} M={M} max_seqlen={max_seqlen} {seg}: 128-bit loads {vector}, "
                  f"local memory {'.local' in k.asm['ptx']}")
            k = compile_one(kernels._segments_loop_kernel, sig, {"N_COLS": M, "MEAN": True, "EMPTY_ZERO": False,
                                                                "GROUP": seg.group, "BLOCK_L": seg.block_l,
                                                                "BLOCK_M": seg.block_m}, (0, 1, 2), seg.num_warps)
            vector = vector_loads(k)
            print(f"segments_loop {vdt} {odt} M={M} max_seqlen={max_seqlen}: 128-bit loads {vector}")
            if not vector:
                return 2
            esig = {"grad_ptr": f"*{vdt}", "offsets_ptr": f"*{odt}", "out_ptr": f"*{vdt}", "n_rows": "i64",
                    "N_COLS": "constexpr", "n_segments": "i32", "n_tiles": "i32", "MEAN": "constexpr",
                    "GROUP": "constexpr", "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}
            k = compile_one(kernels._segments_expand_kernel, esig, {"N_COLS": M, "MEAN": True, "GROUP": seg.group,
                                                                   "BLOCK_L": seg.block_l, "BLOCK_M": seg.block_m},
                            (0, 1, 2), seg.num_warps)
            vector = "st.global.v4" in k.asm["ptx"]
            print(f"segments_expand {vdt} {odt} M={M} max_seqlen={max_seqlen} (i64 rows): 128-bit stores {vector}")
            if not vector:
                return 2
    # Odd widths whose rows are 16-byte aligned (M a multiple of 4, not of 16): M is compiled into the whole-segments
    # kernels, so their loads vectorise where a runtime M (no divisibility by 16) left them scalar
    for M in (24, 40):
        seg = config.segments_config(M, 256, 65536, torch.device("cpu"))
        k = compile_one(kernels._segments_kernel, segments_signature("fp32", "i64"),
                        {"N_COLS": M, "MEAN": False, "EMPTY_ZERO": False, "GROUP": seg.group, "BLOCK_L": seg.block_l,
                         "BLOCK_M": seg.block_m}, (0, 1, 2), seg.num_warps)
        vector = vector_loads(k)
        print(f"segments fp32 M={M} {seg}: 128-bit loads {vector}")
        if not vector:
            return 2
    # Inductor may pass an int argument equal to 1 as a constant: the kernels must compile that way too.
    sig = {"values_ptr": "*fp32", "offsets_ptr": "*i64", "out_ptr": "*fp32", "ws_ptr": "*fp32", "n_rows": "i32",
           "n_cols": "i32", "n_segments": "constexpr", "rows_per_chunk": "i32", "n_chunks": "constexpr",
           "MEAN": "constexpr", "EMPTY_ZERO": "constexpr", "BLOCK_L": "constexpr", "BLOCK_M": "constexpr"}
    compile_one(kernels._reduce_kernel, sig, {"n_segments": 1, "n_chunks": 1, "MEAN": True, "EMPTY_ZERO": False,
                                             "BLOCK_L": 32, "BLOCK_M": 64}, (0, 1, 2, 3), 4)
    sig = {"offsets_ptr": "*i64", "out_ptr": "*fp32", "ws_ptr": "*fp32", "n_cols": "i32", "rows_per_chunk": "i32",
           "n_chunks": "constexpr", "MEAN": "constexpr", "EMPTY_ZERO": "constexpr", "BLOCK_P": "constexpr",
           "BLOCK_M": "constexpr"}
    compile_one(kernels._combine_kernel, sig, {"n_chunks": 1, "MEAN": True, "EMPTY_ZERO": True, "BLOCK_P": 32,
                                              "BLOCK_M": 64}, (0, 1, 2), 4)
    print("reduce/combine with B = C = 1 passed as constants: ok")
    return layer_norm_with_a_symbolic_eps()


def layer_norm_with_a_symbolic_eps() -> int:
    """Every layer-norm kernel taking eps compiles with eps typed fp64, as Inductor passes a symbolic float (the
    eps a compiled backward saved): its rstd must stay fp32 or the loops' fp32 accumulators change type."""
    from jaggedperf.ops.layer_norm import kernels as ln

    constexprs = {"BLOCK_L": 16, "BLOCK_M": 256, "PARTS": 4}  # a tile the segments loop over
    for fn in (ln._layer_norm_kernel, ln._layer_norm_backward_kernel, ln._layer_norm_parts_kernel,
               ln._layer_norm_backward_sums_kernel, ln._layer_norm_backward_parts_kernel):
        names = fn.arg_names
        sig = {name: ("*i64" if name == "offsets_ptr" else "*fp32" if name.endswith("_ptr") else "fp64"
                      if name == "eps" else "constexpr" if name in constexprs else "i32") for name in names}
        assert "eps" in sig, fn.__name__
        aligned = tuple(i for i, name in enumerate(names) if name.endswith("_ptr"))
        compile_one(fn, sig, {k: v for k, v in constexprs.items() if k in names}, aligned, 4)
    print("layer norm kernels with an fp64 eps: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
