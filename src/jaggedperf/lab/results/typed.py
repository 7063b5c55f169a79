"""Dataclasses back from the JSON that ``dataclasses.asdict`` + ``json`` made of them, by their field types.

``from_data(Evidence, d)`` walks ``Evidence``'s fields (``dataclasses.fields``) with their resolved types
(``typing.get_type_hints``), so a nested dataclass, an optional one, a list or dict of them, a tuple, an
enum or a ``Literal`` is rebuilt without a mapping written per class. Files written before a field existed
load with the field's default; keys the class does not know (``case_label``, fields since removed) are
ignored. A value that cannot be what its field says, or a required field that is missing, raises
``IncompatibleData`` naming where it is (``cells[0].evidence.host.guards: missing required field 'available'``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")

_NONE = type(None)


class IncompatibleData(ValueError):
    """Data that does not fit the dataclass it should become; the message says where and why."""


def from_data(cls: type[T], data: Any, where: str = "") -> T:
    """``data`` (JSON-shaped: dicts, lists, numbers, strings, None) as an instance of ``cls``.

    Args:
        cls: a dataclass, or any type ``convert`` understands.
        data: what ``dataclasses.asdict`` (then JSON) made of one.
        where: the path of ``data`` in its document, for messages.

    Raises:
        IncompatibleData: a required field is missing, or a value is not of its field's type.
    """
    return convert(cls, data, where)


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                 for f in dataclasses.fields(cls) if f.init)


def _at(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _fail(where: str, message: str) -> IncompatibleData:
    return IncompatibleData(f"{where or 'the document'}: {message}")


def _kind(value: Any) -> str:
    """``value`` for a message: its JSON kind, and the value itself where it is short (``a string "fast"``)."""
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", _NONE: "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
    if value is None or not isinstance(value, (dict, list, str, bool, int, float)):
        return kind
    shown = json.dumps(value)
    return f"{kind} {shown}" if len(shown) <= 40 else kind


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def convert(tp: Any, value: Any, where: str = "") -> Any:
    """``value`` as type ``tp`` (see ``from_data``)."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if _NONE in args:
                return None
            raise _fail(where, f"null where {_name(tp)} is needed")
        options = [a for a in args if a is not _NONE]
        errors = []
        for option in options:
            try:
                return convert(option, value, where)
            except IncompatibleData as exc:
                errors.append(exc)
        raise errors[0] if len(errors) == 1 else _fail(where, f"{_kind(value)} fits none of {_name(tp)}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, where)
    if origin is typing.Literal:
        if value in args:
            return value
        raise _fail(where, f"{value!r} is not one of {', '.join(map(repr, args))}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _fail(where, f"{value!r} is not a {tp.__name__} ({', '.join(repr(m.value) for m in tp)})") from None
    if origin in (list, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(value, list):
            raise _fail(where, f"expected a list, got {_kind(value)}")
        item = args[0] if args else Any
        items = [convert(item, v, _at(where, i)) for i, v in enumerate(value)]
        return items if (origin or tp) is list else (origin or tp)(items)
    if origin is tuple or tp is tuple:
        if not isinstance(value, (list, tuple)):
            raise _fail(where, f"expected a list, got {_kind(value)}")
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            item = args[0] if args else Any
            return tuple(convert(item, v, _at(where, i)) for i, v in enumerate(value))
        if len(args) != len(value):
            raise _fail(where, f"expected {len(args)} items, got {len(value)}")
        return tuple(convert(a, v, _at(where, i)) for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _fail(where, f"expected an object, got {_kind(value)}")
        key_tp, val_tp = args if args else (Any, Any)
        return {convert(key_tp, k, where): convert(val_tp, v, _at(where, str(k))) for k, v in value.items()}
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        raise _fail(where, f"expected a number, got {_kind(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _fail(where, f"expected an integer, got {_kind(value)}")
    if tp in (str, bool):
        if type(value) is tp:
            return value
        raise _fail(where, f"expected {'a string' if tp is str else 'a boolean'}, got {_kind(value)}")
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise _fail(where, f"expected {tp.__name__}, got {_kind(value)}")
    raise _fail(where, f"cannot read a field of type {_name(tp)}")


def _dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(where, f"expected an object ({cls.__name__}), got {_kind(value)}")
    kwargs = {}
    for name, tp, required in _field_types(cls):
        if name in value:
            kwargs[name] = convert(tp, value[name], _at(where, name))
        elif required:
            raise _fail(where, f"missing required field {name!r} of {cls.__name__} (a file from an incompatible "
                               "version?)")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # the class's own checks (__post_init__)
        raise _fail(where, f"not a valid {cls.__name__}: {exc}") from None
