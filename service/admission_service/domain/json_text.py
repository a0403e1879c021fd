"""The JSON text of a provider body: ``dumps`` writes exactly what
``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` writes, about seven times
faster for the large texts a long session carries (orjson, whose SIMD string escaping is what
makes a 4.6 MB body 5 ms instead of 35).

orjson and ``json`` write the same text for strings, integers within 64 bits, booleans,
``null``, lists, tuples and string-keyed objects. They differ in two places, and both are
closed here rather than hoped away:

- floats: orjson writes ``1e-5`` and ``1e16`` where ``json`` writes ``1e-05`` and ``1e+16``,
  and ``null`` for NaN. Every float in a body comes from JSON the caller sent (a tool call's
  arguments, a tool's parameter schema), so ``loads`` parses those as ``JsonFloat``, which
  orjson hands to ``_as_json`` (it writes no float subclass itself) and ``json`` writes as the
  float it is. A body holds no other float.
- what orjson refuses (integers beyond 64 bits, strings with lone surrogates, non-string keys)
  is written by ``json`` itself, so the text is still ``json``'s.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["JsonFloat", "canonical", "dumps", "dumps_utf8", "loads"]


class JsonFloat(float):
    """A number parsed from a caller's JSON, written back as ``json.dumps`` writes a float."""

    __slots__ = ()


def loads(text: str) -> Any:
    """``json.loads(text)`` with its floats (and NaN, Infinity) as ``JsonFloat``."""
    return json.loads(text, parse_float=JsonFloat, parse_constant=JsonFloat)


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, byte for byte."""
    try:
        return orjson.dumps(value, default=_as_json).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dumps_utf8(value: Any) -> bytes:
    """``dumps(value)`` in UTF-8, as orjson writes it: a body is sent as these bytes, so
    keeping them saves decoding a megabytes body to text and encoding it back. A lone
    surrogate (a caller's JSON may escape one: ``"\\ud800"``), which UTF-8 cannot hold, is
    written as that escape again; it can only stand in a string, where the escape is JSON."""
    try:
        return orjson.dumps(value, default=_as_json)
    except orjson.JSONEncodeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def canonical(value: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)`` in
    UTF-8, byte for byte: the service's stored JSON (``storage/codec.py``). orjson writes it
    while ``value`` is plain JSON (dicts with string keys, lists, tuples, strings, integers,
    booleans, None), which a header's tools are however large: json took 92 ms to write a 14
    MiB tool set, on the event loop, twice in the step that logged it; orjson takes 10. A value
    with a float (a usage's, a forecast's: small), or anything else, is written by ``json``.
    Walking the value costs per node, not per byte."""
    if _plain(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # beyond 64 bits, a lone surrogate
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


_LEAVES = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what orjson writes as ``json`` does (exact types: a
    subclass, a float, an enum goes to ``json``)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        else:
            return False
    return True


def _as_json(value: object) -> orjson.Fragment:
    if isinstance(value, float):
        return orjson.Fragment(json.dumps(float(value)))
    raise TypeError(f"{type(value).__name__} is not JSON")
