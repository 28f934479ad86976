"""Typed fields of a decoded record's JSON document, each refused with the reason of
docs/protocol.md's rule 16 (``missing_field``, ``wrong_type``, ``bad_value``): the decoder's
(codec.py) one way of reading a field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupkit.errors import RecordRejected
from groupkit.protocol.vocab import RejectReason


def get_field(doc: Mapping[str, Any], name: str, typ: type | tuple[type, ...]) -> Any:
    if name not in doc:
        raise RecordRejected(RejectReason.MISSING_FIELD, name)
    v = doc[name]
    # bool is an int subclass; never accept it where a number is meant
    if not isinstance(v, typ) or (isinstance(v, bool) and bool not in _as_tuple(typ)):
        raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: {type(v).__name__}")
    return v


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def str_field(doc: Mapping[str, Any], name: str, allow_empty: bool = False) -> str:
    v: str = get_field(doc, name, str)
    if not v and not allow_empty:
        raise RecordRejected(RejectReason.BAD_VALUE, f"{name} is empty")
    return v


def nat_field(doc: Mapping[str, Any], name: str) -> int:
    v: int = get_field(doc, name, int)
    if v < 0:
        raise RecordRejected(RejectReason.BAD_VALUE, f"{name} < 0")
    return v


def opt_field(doc: Mapping[str, Any], name: str, typ: type | tuple[type, ...]) -> Any:
    if name not in doc:
        raise RecordRejected(RejectReason.MISSING_FIELD, name)
    return None if doc[name] is None else get_field(doc, name, typ)


def topics_field(doc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    v = get_field(doc, name, list)
    if not all(isinstance(t, str) and t for t in v):
        raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: topics must be non-empty strings")
    return tuple(sorted(set(v)))
