"""Named arrays in one file, read back by any number of threads at once.

Not numpy's .npy/.npz: their headers are parsed with `ast.literal_eval`, and CPython 3.11 before 3.11.8 cannot parse
in several threads at once (gh-106905: a `SystemError: AST constructor recursion depth mismatch` now and then, seen
with read-ahead threads loading packet indexes). Here the layout is JSON: a file is `MAGIC`, the JSON header's
length (8 bytes, little-endian), the header (each array's name, dtype and shape, in order) and each array's bytes
(C order) at the next multiple of `ALIGN` from the start of the file. Only plain dtypes are kept (no objects, fields
or sub-arrays), and the reader accepts nothing else: a damaged header is a ValueError naming the file, never an
array of whatever the bytes say.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

MAGIC = b"RSARRAY1"
ALIGN = 64  # every array starts at a multiple of this from the file's start: aligned for any dtype
DTYPE = re.compile(r"[<>|=][a-zA-Z]\d+(\[\w+\])?")  # a dtype's .str: byte order, kind, size (a datetime's unit)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _plain(kind: np.dtype) -> bool:
    """A dtype whose values are raw bytes: no Python objects, no fields, no sub-arrays."""
    return not kind.hasobject and kind.fields is None and kind.subdtype is None


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` (name -> array, names of any characters, order kept) to `path`, replacing what is there.

    Publishing it atomically is the caller's (a derived-cache folder is renamed into place whole; durable.py)."""
    laid_out = {name: np.asarray(array, order="C") for name, array in arrays.items()}  # 0-d kept 0-d
    for name, array in laid_out.items():
        if not _plain(array.dtype):
            raise TypeError(f"{path}: array {name!r} is of dtype {array.dtype}: only plain (raw-byte) dtypes are kept")
    header = json.dumps([[name, a.dtype.str, list(a.shape)] for name, a in laid_out.items()]).encode()
    with open(path, "wb") as out:
        out.write(MAGIC + len(header).to_bytes(8, "little") + header)
        position = len(MAGIC) + 8 + len(header)
        for array in laid_out.values():
            start = _aligned(position)
            out.write(bytes(start - position))
            out.write(array.tobytes())
            position = start + array.nbytes


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """What `write_arrays` wrote to `path`, as writable arrays; ValueError naming the file if it is not one whole."""
    data = bytearray(path.read_bytes())  # writable arrays, as np.load gives
    start = len(MAGIC) + 8
    if data[: len(MAGIC)] != MAGIC or len(data) < start:
        raise ValueError(f"{path}: not an array file robostream wrote (no {MAGIC.decode()} header)")
    end = start + int.from_bytes(data[len(MAGIC) : start], "little")
    if end > len(data):
        raise ValueError(f"{path}: {len(data)} bytes, its header ends at byte {end}: cut short")
    try:
        entries = _entries(json.loads(data[start:end]))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: damaged array file header ({exc})") from exc
    arrays, position = {}, end
    for name, kind, shape in entries:
        offset = _aligned(position)
        position = offset + kind.itemsize * math.prod(shape)  # Python ints: no overflow
        if position > len(data):
            raise ValueError(f"{path}: {len(data)} bytes, its array {name!r} ends at byte {position}: cut short")
        arrays[name] = np.ndarray(shape, dtype=kind, buffer=data, offset=offset)
    if position != len(data):
        raise ValueError(f"{path}: {len(data)} bytes, its arrays end at byte {position}")
    return arrays


def _entries(header: object) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """The header's (name, dtype, shape) entries, exactly as `write_arrays` writes them; ValueError otherwise."""
    if not isinstance(header, list):
        raise ValueError("not a list of arrays")
    entries, names = [], set()
    for entry in header:
        if not (isinstance(entry, list) and len(entry) == 3):
            raise ValueError(f"entry {entry!r} is not [name, dtype, shape]")
        name, dtype, shape = entry
        if not isinstance(name, str) or name in names:
            raise ValueError(f"array name {name!r} is not a string, or not unique")
        # A plain dtype string (byte order, kind, size): numpy parses others (e.g. "(2,)<i4") with ast
        if not isinstance(dtype, str) or not DTYPE.fullmatch(dtype):
            raise ValueError(f"array {name!r}: dtype {dtype!r} is not one write_arrays writes")
        try:
            kind = np.dtype(dtype)
        except TypeError:  # a code numpy does not know
            kind = None
        if kind is None or kind.str != dtype or not _plain(kind):
            raise ValueError(f"array {name!r}: dtype {dtype!r} is not one write_arrays writes")
        if not (isinstance(shape, list) and all(type(n) is int and 0 <= n < 1 << 62 for n in shape)):
            raise ValueError(f"array {name!r}: shape {shape!r} is not a list of sizes")
        names.add(name)
        entries.append((name, kind, tuple(shape)))
    return entries
