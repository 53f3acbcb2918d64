"""Named arrays in one file, read back by any number of threads at once.

Not numpy's .npy/.npz: their headers are parsed with `ast.literal_eval`, and CPython 3.11 before 3.11.8 cannot parse
in several threads at once (gh-106905: a `SystemError: AST constructor recursion depth mismatch` now and then, seen
with read-ahead threads loading packet indexes). Here the layout is JSON: a file is `MAGIC`, the JSON header's
length (8 bytes, little-endian), the header (each array's name, dtype and shape, in order) and each array's bytes
(C order) at the next multiple of `ALIGN` from the start of the file. Arrays of objects cannot be written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

MAGIC = b"RSARRAY1"
ALIGN = 64  # every array starts at a multiple of this from the file's start: aligned for any dtype


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` (name -> array, names of any characters, order kept) to `path`, replacing what is there.

    Publishing it atomically is the caller's (a derived-cache folder is renamed into place whole; durable.py)."""
    laid_out = {name: np.asarray(array, order="C") for name, array in arrays.items()}  # 0-d kept 0-d
    for name, array in laid_out.items():
        if array.dtype.hasobject:
            raise TypeError(f"{path}: array {name!r} holds Python objects ({array.dtype}): only raw dtypes are kept")
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
    try:
        entries = [
            (str(name), np.dtype(dtype), tuple(int(n) for n in shape))
            for name, dtype, shape in json.loads(data[start:end])
        ]
    except (TypeError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: damaged array file header ({exc})") from exc
    arrays, position = {}, end
    for name, kind, shape in entries:
        if min(shape, default=0) < 0:
            raise ValueError(f"{path}: array {name!r} has a negative dimension {shape}")
        count = int(np.prod(shape, dtype=np.int64))
        offset = _aligned(position)
        position = offset + kind.itemsize * count
        if position > len(data):
            raise ValueError(f"{path}: {len(data)} bytes, its array {name!r} ends at byte {position}: cut short")
        arrays[name] = np.ndarray(shape, dtype=kind, buffer=data, offset=offset)
    if position != len(data):
        raise ValueError(f"{path}: {len(data)} bytes, its arrays end at byte {position}")
    return arrays
