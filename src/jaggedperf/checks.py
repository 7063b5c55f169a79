"""Input checks for the jagged ops, each message naming the argument and the rule it breaks.

One checker for every entry point (the public functions, the ``torch.ops.jaggedperf.*`` operators'
bodies and CPU kernels, ``JaggedBatch``, the lab), so that each bad input gets the same message wherever
it comes in.

``check_layout`` / ``check_expand_layout`` / ``check_max_seqlen`` look only at shapes, dtypes, devices
and host ints: no device sync, traceable by torch.compile, always run. ``check_offsets`` reads the
offsets' values: on the CPU that costs no sync and the operators always run it (an unchecked offset
could make the pure-torch kernel index out of bounds); on CUDA it is one device-to-host copy, run only
when asked (``validate=True`` or ``JAGGEDPERF_VALIDATE``); the lab always runs it. Under torch.compile
a requested check is ``assert_offsets_async``: the same conditions as asserts in the graph.
"""

from __future__ import annotations

import os

import torch

try:
    import numpy as _np
except ImportError:  # pragma: no cover  (torch runs without numpy; the checks then use torch)
    _np = None

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# the operators also take float64 on the CPU (gradcheck); the CUDA kernels accumulate in fp32, so not there
CPU_OPERATOR_DTYPES = SUPPORTED_DTYPES + (torch.float64,)
OFFSET_DTYPES = (torch.int32, torch.int64)
INT64_MAX = 2**63 - 1

VALIDATE_ENV = "JAGGEDPERF_VALIDATE"
VALIDATE_ON = ("1", "true", "yes", "on")
VALIDATE_OFF = ("", "0", "false", "no", "off")
# os.environ.get costs ~1 µs (it encodes the key each time), as much as the rest of a native call's Python: the
# environment's encoded entries are read directly where CPython keeps them (os.environ's own dict, which
# every os.environ update writes), with os.environ.get wherever that dict is not there. Each raw value is
# parsed once (_PARSED: raw value -> on/off); an unknown one raises every time it is read.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(VALIDATE_ENV) if _ENV_DATA is not None and hasattr(os.environ, "encodekey") else None
_PARSED: dict = {}


def validation_requested(validate: bool | None) -> bool:
    """Whether to check the offsets' values.

    Args:
        validate: the call's argument; None defers to the JAGGEDPERF_VALIDATE environment variable
            (on: 1/true/yes/on; off: 0/false/no/off/empty/unset; any case, surrounding spaces ignored).

    Returns:
        ``validate`` if given, else the variable's setting (off when unset).

    Raises:
        ValueError: JAGGEDPERF_VALIDATE holds anything else.
    """
    if validate is not None:
        return validate
    raw = os.environ.get(VALIDATE_ENV) if _ENV_KEY is None else _ENV_DATA.get(_ENV_KEY)
    if raw is None:
        return False
    parsed = _PARSED.get(raw)
    return parsed if parsed is not None else _parse_switch(raw)


def _parse_switch(raw) -> bool:
    text = (os.environ.decodevalue(raw) if isinstance(raw, bytes) else raw).strip().lower()
    if text in VALIDATE_ON or text in VALIDATE_OFF:
        _PARSED[raw] = text in VALIDATE_ON
        return _PARSED[raw]
    shown = os.environ.decodevalue(raw) if isinstance(raw, bytes) else raw
    raise ValueError(f"{VALIDATE_ENV}={shown!r} is not a switch: use one of {', '.join(VALIDATE_ON)} (on) or "
                     f"{', '.join(v for v in VALIDATE_OFF if v)} or empty (off)")


def check_layout(values: torch.Tensor, offsets: torch.Tensor, *, dtypes=SUPPORTED_DTYPES) -> None:
    """The metadata of a reduction's inputs (no sync).

    Args:
        values: (total_len, M) in one of ``dtypes``.
        offsets: (B + 1,) int32/int64 on values' device.
        dtypes: the value dtypes accepted.

    Raises:
        TypeError: a non-tensor, offsets not int32/int64, values of another dtype.
        ValueError: a wrong number of dims, empty offsets, two devices.
    """
    if not isinstance(values, torch.Tensor) or not isinstance(offsets, torch.Tensor):
        raise TypeError("values and offsets must be torch.Tensor")
    if values.dim() != 2:
        raise ValueError(f"values must be 2-D (total_len, M); got {values.dim()}-D shape {tuple(values.shape)}")
    _check_offsets_layout(offsets)
    _check_dtype("values", values, dtypes)
    if offsets.device != values.device:
        raise ValueError(f"offsets must be on the same device as values; got {offsets.device} and {values.device}")


def check_expand_layout(grad: torch.Tensor, offsets: torch.Tensor, n_rows, *, dtypes=SUPPORTED_DTYPES) -> None:
    """The metadata of ``jagged_expand``'s inputs (the reductions' backward; no sync).

    Args:
        grad: (B, M) in one of ``dtypes``.
        offsets: (B + 1,) int32/int64 on grad's device.
        n_rows: the rows to fill, an int >= 0.
        dtypes: the grad dtypes accepted.

    Raises:
        TypeError: a non-tensor, offsets not int32/int64, grad of another dtype, n_rows not an int.
        ValueError: a wrong number of dims, empty offsets, B mismatch, two devices, n_rows < 0.
    """
    if not isinstance(grad, torch.Tensor) or not isinstance(offsets, torch.Tensor):
        raise TypeError("grad and offsets must be torch.Tensor")
    if grad.dim() != 2:
        raise ValueError(f"grad must be 2-D (B, M); got {grad.dim()}-D shape {tuple(grad.shape)}")
    _check_offsets_layout(offsets)
    if grad.shape[0] != offsets.shape[0] - 1:
        raise ValueError(f"grad must have B = offsets.shape[0] - 1 = {offsets.shape[0] - 1} rows; got {grad.shape[0]}")
    _check_dtype("grad", grad, dtypes)
    if offsets.device != grad.device:
        raise ValueError(f"offsets must be on the same device as grad; got {offsets.device} and {grad.device}")
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, torch.SymInt)):
        raise TypeError(f"n_rows must be an int; got {type(n_rows).__name__}")
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0; got {int(n_rows)}")


def check_max_seqlen(max_seqlen, name: str) -> None:
    """``max_seqlen``: None or an int in [0, 2**63 - 1] (a SymInt under torch.compile).

    Args:
        max_seqlen: the argument.
        name: the calling function, for the message.

    Raises:
        ValueError: anything else (a bool, a float, a negative int, an int past int64).
    """
    if max_seqlen is None:
        return
    if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, (int, torch.SymInt)):
        raise ValueError(f"{name}: max_seqlen must be None or an int in [0, 2**63 - 1]; got {type(max_seqlen).__name__}")
    # (a SymInt is an int64 by construction: only its sign can be wrong; int() formats it under Dynamo, where
    # a SymInt in an f-string is a graph break that hides this message)
    if max_seqlen < 0 or (type(max_seqlen) is int and max_seqlen > INT64_MAX):
        raise ValueError(f"{name}: max_seqlen must be None or an int in [0, 2**63 - 1]; got {int(max_seqlen)}")


def check_offsets(values: torch.Tensor, offsets: torch.Tensor) -> None:
    """offsets[0] == 0, non-decreasing, offsets[-1] == values.shape[0]. Syncs once (not on the CPU).

    Args:
        values: the (total_len, M) values the offsets cut.
        offsets: (B + 1,) int32/int64, layout already checked.

    Raises:
        ValueError: the first rule broken, with the index and values.
    """
    check_offsets_span(offsets, values.shape[0], "values.shape[0]")


def check_offsets_span(offsets: torch.Tensor, n_rows: int, rows_name: str) -> None:
    """``check_offsets`` against a row count: offsets[0] == 0, non-decreasing, offsets[-1] == n_rows.

    Args:
        offsets: (B + 1,) int32/int64, layout already checked.
        n_rows: the rows they must span.
        rows_name: how the message names n_rows ("values.shape[0]", "n_rows").

    Raises:
        ValueError: the first rule broken, with the index and values.
    """
    host = offsets.detach().cpu()
    if _np is not None:  # numpy's three passes over B + 1 ints cost a few µs, torch's several times more
        ints = host.numpy()
        first, last = int(ints[0]), int(ints[-1])
        down = ints[1:] < ints[:-1]
        at = int(down.argmax()) if down.any() else -1
    else:
        ints = host.to(torch.int64)
        first, last = int(ints[0]), int(ints[-1])
        down = ints[1:] < ints[:-1]
        at = int(torch.nonzero(down)[0]) if bool(down.any()) else -1
    if first != 0:
        raise ValueError(f"offsets[0] must be 0; got {first}")
    if at >= 0:
        raise ValueError(f"offsets must be non-decreasing; offsets[{at + 1}]={int(ints[at + 1])} < offsets[{at}]={int(ints[at])}")
    if last != n_rows:
        raise ValueError(f"offsets[-1] must equal {rows_name}={n_rows}; got {last}")


def assert_offsets_async(values: torch.Tensor, offsets: torch.Tensor) -> None:
    """``check_offsets``' rules as ``torch._assert_async`` (under torch.compile, where reading the values on
    the host would break the graph): on the CPU a RuntimeError with the rule, on CUDA a device-side
    assert (which ends the process's CUDA context, like any device-side assert). No sync is added.

    Args:
        values, offsets: as for ``check_offsets`` (fake or real tensors).
    """
    torch._assert_async(offsets[0] == 0, "offsets[0] must be 0")
    torch._assert_async((offsets.diff() >= 0).all(), "offsets must be non-decreasing")
    torch._assert_async(offsets[-1] == values.shape[0], "offsets[-1] must equal values.shape[0]")


def _check_offsets_layout(offsets: torch.Tensor) -> None:
    if offsets.dim() != 1:
        raise ValueError(f"offsets must be 1-D (B+1,); got {offsets.dim()}-D shape {tuple(offsets.shape)}")
    if offsets.dtype not in OFFSET_DTYPES:
        raise TypeError(f"offsets must be int32 or int64; got {offsets.dtype}")
    if offsets.numel() < 1:
        raise ValueError("offsets must hold B+1 >= 1 elements; got an empty tensor")


def _check_dtype(name: str, tensor: torch.Tensor, dtypes) -> None:
    if tensor.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} dtype {tensor.dtype} is not supported; supported: {names}")

