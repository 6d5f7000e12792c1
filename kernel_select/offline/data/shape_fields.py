"""The fields of one shapes-file entry, read strictly: a shapes file is typed by hand, and a field
read leniently runs the wrong benchmark silently (a misspelled "layuot" benchmarks "nn", `"m": true`
benchmarks m = 1, m = 2^40 fails only at the write, after the work).

Each check raises ValueError naming the field; the loaders add the file and the entry's index.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from kernel_select.lut.entries import MAX_DIM


def entry(item: Any, known: Collection[str]) -> Mapping[str, Any]:
    """`item` when it is a JSON object whose keys are all `known`.

    Raises:
        ValueError: for anything but an object, or an unknown key (with the known key it resembles).
    """
    if not isinstance(item, dict):
        raise ValueError(f"expected an object such as {{\"m\": 560, \"n\": 1280, \"k\": 3420}}, "
                         f"got {type(item).__name__}")
    for key in item:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown key {key!r}{hint}; known keys: {', '.join(sorted(known))}")
    return item


def size(item: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """The GEMM size `item[key]`: an integer from 1 to MAX_DIM (not a bool, a float or a string).

    Raises:
        ValueError: naming the field, for a missing (without a default) or malformed size.
    """
    if key not in item:
        if default is None:
            raise ValueError(f"{key}: missing; give it as an integer from 1 to {MAX_DIM}")
        return default
    return bounded_int(key, item[key])


def bounded_int(field: str, value: Any) -> int:
    """`value` when it is an int from 1 to MAX_DIM (Inductor indexes with int32)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise ValueError(f"{field}: expected an integer from 1 to {MAX_DIM}, got {shown}")
    return value


def flag(item: Mapping[str, Any], key: str) -> bool:
    """The JSON true or false `item[key]` (False when absent): not 1, "yes" or null.

    Raises:
        ValueError: naming the field, for a value that is not a JSON boolean.
    """
    value = item.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}"[:120])
    return value


def text(item: Mapping[str, Any], key: str, default: str) -> str:
    """The string `item[key]` (`default` when absent).

    Raises:
        ValueError: naming the field, for a value that is not a string.
    """
    value = item.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {type(value).__name__}")
    return value
