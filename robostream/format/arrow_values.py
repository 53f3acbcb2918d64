"""Arrow arrays to and from numpy without Array.to_numpy or pa.array, which import pandas on their first call in a
process.

That import costs ~0.3 s of CPU, paid again by every fresh DataLoader worker (workers are forked anew each epoch
unless persistent) at its first piece's rows, and by the main process where it reads episode metadata. A flat
numeric array without nulls is its data buffer: numpy reads it in place (read-only, as to_numpy's zero-copy result);
a boolean mask is built from its packed bits.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def arrow_values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a flat numeric (or boolean) Arrow array without nulls, as a 1-D numpy array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ValueError(f"{array.null_count} null value(s)")
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):  # bit-packed, least significant bit first
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(bool)
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise ValueError(f"{array.type} values are not numbers")
    dtype = np.dtype(array.type.to_pandas_dtype())
    if data is None:  # an empty array may have no data buffer
        return np.empty(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def boolean_array(values: np.ndarray) -> pa.BooleanArray:
    """A numpy boolean array as an Arrow one (e.g. a table's filter mask)."""
    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.BooleanArray.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
