"""JSON text as JavaScript's ``JSON.stringify`` writes it, so both clients agree byte for byte.

The kit writes JSON where the provider handed it a parsed value (an Anthropic ``tool_use``
block's ``input``) and where a tool returned one. The TypeScript client writes those with
``JSON.stringify``; ``dumps`` is the same text in Python: no whitespace; keys in the order a
JavaScript object keeps them (array-index keys such as ``"0"`` first, ascending, then the other
keys in insertion order: an object parsed in JavaScript cannot keep any other); non-ASCII
characters as they are; numbers as ECMAScript's ``Number::toString`` (``1.0`` is ``1``,
``1e21`` is ``1e+21``, ``1e-7`` is ``1e-7``). NaN and the infinities are refused
(``JSON.stringify`` would turn them into ``null``, which is not the value).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["dumps"]


def dumps(value: Any) -> str:
    """``value`` (dicts, lists, tuples, strings, numbers, booleans, None) as compact JSON text."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if value is None or isinstance(value, bool | str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(_in_javascript_order(value)):
            out.append("," if index else "")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            out.append("," if index else "")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


# The largest array index (ECMAScript: an integer below 2**32 - 1 whose canonical string is
# the key); an object's own keys that are array indices come first, in ascending order.
_MAX_ARRAY_INDEX = 2**32 - 2


def _array_index(key: str) -> int | None:
    if not key.isdigit() or not key.isascii() or (len(key) > 1 and key[0] == "0"):
        return None
    index = int(key)
    return index if index <= _MAX_ARRAY_INDEX else None


def _in_javascript_order(value: dict[Any, Any]) -> list[tuple[str, Any]]:
    indexed: list[tuple[int, str, Any]] = []
    named: list[tuple[str, Any]] = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
        index = _array_index(key)
        if index is None:
            named.append((key, item))
        else:
            indexed.append((index, key, item))
    indexed.sort(key=lambda entry: entry[0])
    return [(key, item) for _, key, item in indexed] + named


def _number(value: float) -> str:
    """ECMAScript Number::toString of a finite double (both use the shortest round trip)."""
    if not math.isfinite(value):
        raise ValueError(f"{value} is not a JSON number")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()[1:]
    digits = "".join(map(str, digits_tuple))
    k = len(digits)
    n = k + int(exponent)  # the value is 0.digits * 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        power = f"{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
        text = f"{digits[0]}{'.' + digits[1:] if k > 1 else ''}e{power}"
    return sign + text
