"""Language columns (`lerobot-annotate`, lerobot 0.6.1): `language_persistent` and `language_events`, declared in
info.json with dtype "language" and stored in the data files as a list of structs per frame.

A cell is read the way lerobot reads it (its `datasets` table is cast to `lerobot.datasets.language`'s row
features): a Python list of dicts whose keys are lerobot's row fields in lerobot's order, strings or None,
`timestamp` (persistent rows) rounded to float32, and each `tool_calls` element passed through JSON as the `Json`
feature passes it (pandas' ujson, 10 significant digits for floats); a JSON text element is decoded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from robostream.errors import DatasetFormatError

LANGUAGE_DTYPE = "language"
LANGUAGE_PERSISTENT = "language_persistent"
LANGUAGE_EVENTS = "language_events"
LANGUAGE_COLUMNS = (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS)
# Row fields of each column, in lerobot's order (lerobot.datasets.language.*_ROW_FIELDS).
ROW_FIELDS = {
    LANGUAGE_PERSISTENT: ("role", "content", "style", "timestamp", "camera", "tool_calls"),
    LANGUAGE_EVENTS: ("role", "content", "style", "camera", "tool_calls"),
}
FIX_HINT = (
    "a language column holds per frame a list of structs with fields {fields}, as lerobot-annotate writes "
    "it: re-run lerobot-annotate on the dataset, or drop the column and its entry in meta/info.json"
)
# lerobot.datasets.language.SAY_TOOL_SCHEMA: what LeRobotDatasetMetadata.tools gives when info.json declares none.
SAY_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "say",
        "description": "Speak a short utterance to the user via the TTS executor.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The verbatim text to speak."}},
            "required": ["text"],
        },
    },
}


def language_arrow_type(key: str, json_type: pa.DataType | None = None) -> pa.ListType:
    """lerobot's Arrow type of language column `key` (lerobot.datasets.language.language_*_arrow_type): a list of
    row structs, `role` not null, `timestamp` float32, `tool_calls` a list of JSON values (`json_type`, default
    Arrow's JSON extension type where pyarrow has it, else a string, as lerobot falls back)."""
    json_type = json_type or (pa.json_() if hasattr(pa, "json_") else pa.string())
    types = {
        "role": pa.string(),
        "content": pa.string(),
        "style": pa.string(),
        "timestamp": pa.float32(),
        "camera": pa.string(),
        "tool_calls": pa.list_(json_type),
    }
    return pa.list_(pa.struct([pa.field(f, types[f], nullable=f != "role") for f in ROW_FIELDS[key]]))


def language_array(cells: list[list[Mapping[str, Any]]], key: str) -> pa.Array:
    """Language column `key` of lerobot's type from per-frame lists of row dicts (missing fields None;
    `tool_calls` elements any JSON value). Built from JSON text: pyarrow cannot build JSON values from Python
    objects."""
    fields = ROW_FIELDS[key]
    rows = [
        [{f: _json_texts(row.get(f)) if f == "tool_calls" else row.get(f) for f in fields} for row in cell]
        for cell in cells
    ]
    return pa.array(rows, type=language_arrow_type(key, pa.string())).cast(language_arrow_type(key))


def _json_texts(calls: list[Any] | None) -> list[str] | None:
    return None if calls is None else [json.dumps(call) for call in calls]


def language_keys(features: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The language columns among `features`, in their order."""
    return [k for k, f in features.items() if f.get("dtype") == LANGUAGE_DTYPE]


def check_language_feature(name: str, source: str) -> None:
    """lerobot reads dtype "language" only under its two column names (its row schema depends on the name)."""
    if name not in LANGUAGE_COLUMNS:
        raise DatasetFormatError(
            f"{source}: feature {name!r} has dtype 'language', which lerobot reads only as "
            f"{list(LANGUAGE_COLUMNS)}; rename the column to one of them or give it another "
            "dtype"
        )


def check_language_column(array: pa.Array, key: str, where: str) -> None:
    """`array` (one episode's rows of column `key`, one per frame) must be a list of structs with lerobot's row
    fields, with no null cell or row: else an error naming `where` (file and episode), the key, the first bad frame
    and the fix."""
    fields = ROW_FIELDS[key]
    hint = FIX_HINT.format(fields=list(fields))
    kind = array.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
        raise DatasetFormatError(f"{where}: column {key!r} is {kind}, not a list of structs; {hint}")
    present = [kind.value_type.field(i).name for i in range(kind.value_type.num_fields)]
    missing = [f for f in fields if f not in present]
    if missing:
        raise DatasetFormatError(f"{where}: column {key!r} rows lack field(s) {missing} (they have {present}); {hint}")
    if array.null_count:
        frame = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetFormatError(
            f"{where}, frame {frame}: column {key!r} is null, not a list of structs "
            f"({array.null_count} null cell(s)); {hint}"
        )
    rows = array.values
    if rows.null_count:
        owner = (
            np.searchsorted(
                array.offsets.to_numpy(), np.flatnonzero(rows.is_null().to_numpy(zero_copy_only=False))[0], side="right"
            )
            - 1
        )
        raise DatasetFormatError(f"{where}, frame {int(owner)}: column {key!r} holds a null row; {hint}")


def language_cell(cell: pa.ListScalar, key: str) -> list[dict[str, Any]]:
    """One frame's value of language column `key` (checked by `check_language_column`), as lerobot returns it."""
    fields = ROW_FIELDS[key]
    return [{field: _field_value(field, row.get(field)) for field in fields} for row in cell.as_py()]


def _field_value(field: str, value: Any) -> Any:
    if value is None:
        return None
    if field == "timestamp":
        return float(np.float32(value))  # lerobot's row feature: float32
    if field == "tool_calls":
        return [_json_value(call) for call in value]
    return str(value)


def _json_value(value: Any) -> Any:
    """A `tool_calls` element as `datasets.Json` gives it: JSON text decoded, anything else through JSON."""
    dumps, loads = _ujson()
    if isinstance(value, str):
        try:
            return loads(value)
        except ValueError:
            return value  # a plain string, which the Json feature stores as a JSON string
    return loads(dumps(value))


@functools.cache
def _ujson() -> tuple[Any, Any]:
    """pandas' ujson (the functions `datasets` uses; renamed in pandas 2.2)."""
    import pandas as pd

    json = pd.io.json
    return getattr(json, "ujson_dumps", None) or json.dumps, getattr(json, "ujson_loads", None) or json.loads
