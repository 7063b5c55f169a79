"""Input checks for the jagged ops, each message naming the argument and the rule it breaks.

``check_layout`` looks only at shapes, dtypes and devices: it costs no device sync and always runs.
``check_offsets`` reads the offsets' values (one device-to-host copy), so the ops run it only when
asked (``validate=True`` or ``JAGGEDPERF_VALIDATE=1``); the lab always runs it.
"""

from __future__ import annotations

import os

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OFFSET_DTYPES = (torch.int32, torch.int64)


VALIDATE_ENV = "JAGGEDPERF_VALIDATE"
# os.environ.get costs ~1 µs (it encodes the key each time), as much as the rest of a native call's Python: the
# environment's encoded entries are read directly where CPython keeps them (os.environ's own dict, which
# every os.environ update writes), with os.environ.get wherever that dict is not there.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(VALIDATE_ENV) if _ENV_DATA is not None and hasattr(os.environ, "encodekey") else None
_OFF = ("", "0", "false", "False")


def validation_requested(validate: bool | None) -> bool:
    """``validate`` if given, else the JAGGEDPERF_VALIDATE environment variable (off by default)."""
    if validate is not None:
        return validate
    if _ENV_KEY is None:
        return os.environ.get(VALIDATE_ENV, "0") not in _OFF
    raw = _ENV_DATA.get(_ENV_KEY)
    return raw is not None and os.environ.decodevalue(raw) not in _OFF


def check_layout(values: torch.Tensor, offsets: torch.Tensor, *, dtypes=SUPPORTED_DTYPES) -> None:
    if not isinstance(values, torch.Tensor) or not isinstance(offsets, torch.Tensor):
        raise TypeError("values and offsets must be torch.Tensor")
    if values.dim() != 2:
        raise ValueError(f"values must be 2-D (total_len, M); got {values.dim()}-D shape {tuple(values.shape)}")
    if offsets.dim() != 1:
        raise ValueError(f"offsets must be 1-D (B+1,); got {offsets.dim()}-D shape {tuple(offsets.shape)}")
    if offsets.dtype not in OFFSET_DTYPES:
        raise TypeError(f"offsets must be int32 or int64; got {offsets.dtype}")
    if offsets.numel() < 1:
        raise ValueError("offsets must hold B+1 >= 1 elements; got an empty tensor")
    if values.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"values dtype {values.dtype} is not supported; supported: {names}")
    if offsets.device != values.device:
        raise ValueError(f"offsets must be on the same device as values; got {offsets.device} and {values.device}")


def check_offsets(values: torch.Tensor, offsets: torch.Tensor) -> None:
    """offsets[0] == 0, non-decreasing, offsets[-1] == values.shape[0]. Syncs once."""
    host = offsets.detach().to("cpu", torch.int64)
    if int(host[0]) != 0:
        raise ValueError(f"offsets[0] must be 0; got {int(host[0])}")
    if host.numel() > 1:
        steps = host.diff()
        if bool((steps < 0).any()):
            at = int(torch.nonzero(steps < 0)[0])
            raise ValueError(f"offsets must be non-decreasing; offsets[{at + 1}]={int(host[at + 1])} < offsets[{at}]={int(host[at])}")
    if int(host[-1]) != values.shape[0]:
        raise ValueError(f"offsets[-1] must equal values.shape[0]={values.shape[0]}; got {int(host[-1])}")
