"""The message for a name that is not one of the valid ones, with a "did you mean" for a near miss (difflib).

One wording wherever a name is refused: the lab's registry and modes (``KeyError`` / ``ValueError`` from the
Python API) and the CLI's checks (``cli/_names.py``) all build it here.
"""

from __future__ import annotations

import difflib
from typing import Sequence


def close_matches(name: str, valid: Sequence[str], n: int = 2) -> list[str]:
    """The valid names closest to ``name`` (at most ``n``, difflib's ratio ≥ 0.6), closest first."""
    return difflib.get_close_matches(name, list(valid), n=n, cutoff=0.6)


def unknown_message(kind: str, name: str, valid: Sequence[str], where: str = "") -> str:
    """``unknown implementation 'jaggedpref' of jagged_mean; did you mean 'jaggedperf'? (valid: …)``."""
    close = close_matches(name, valid) if isinstance(name, str) else []
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r}{' ' + where if where else ''}{hint} (valid: {', '.join(valid) or '(none)'})"
