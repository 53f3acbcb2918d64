"""robostream/array_file.py: named arrays written and read back whole, in threads, and damage named."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from robostream.array_file import read_arrays, write_arrays

ARRAYS = {
    "int64": np.arange(20, dtype=np.int64),
    "float32 2-D": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4),
    "uint8 odd": np.arange(7, dtype=np.uint8),  # leaves the next array off any 8-byte boundary without padding
    "bool": np.array([True, False, True]),
    "strings": np.array(["a", "longer one"]),
    "scalar": np.asarray(5),
    "empty (0, 3)": np.zeros((0, 3), dtype=np.float64),
    "big-endian": np.arange(3, dtype=">i4"),
    "feature\x1fstat / ünïcode": np.array([1.5]),
    "transposed": np.arange(6, dtype=np.int16).reshape(2, 3).T,  # not C-contiguous when written
}


def test_arrays_come_back_with_their_names_order_dtypes_and_shapes(tmp_path):
    write_arrays(tmp_path / "a.arrays", ARRAYS)
    back = read_arrays(tmp_path / "a.arrays")
    assert list(back) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape, name
        np.testing.assert_array_equal(back[name], array, err_msg=name)
        assert back[name].flags.writeable and back[name].flags.aligned, name
    back["int64"][0] = 7  # writable as np.load's arrays are: callers may fill them in place


def test_no_arrays_is_a_file_too(tmp_path):
    write_arrays(tmp_path / "none.arrays", {})
    assert read_arrays(tmp_path / "none.arrays") == {}


def test_threads_read_the_same_file_at_once(tmp_path):
    """What read-ahead threads do with packet indexes (np.load failed there on Python 3.11.7, gh-106905)."""
    write_arrays(tmp_path / "a.arrays", ARRAYS)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: read_arrays(tmp_path / "a.arrays"), range(200)))
    for back in results:
        np.testing.assert_array_equal(back["float32 2-D"], ARRAYS["float32 2-D"])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda data: data[:-1], "cut short"),
        (lambda data: data + b"\0", "its arrays end at byte"),
        (lambda data: b"NOTARRAY" + data[8:], "not an array file robostream wrote"),
        (lambda data: data[:4], "not an array file robostream wrote"),
        (lambda data: data.replace(b'"<i8"', b'"<x8"'), "damaged array file header"),
        (lambda data: data.replace(b"[20]", b"[-1]"), "negative dimension"),
        (lambda data: data[:16] + b"{" + data[17:], "damaged array file header"),
    ],
    ids=["cut", "extended", "magic", "tiny", "dtype", "negative", "json"],
)
def test_a_damaged_file_is_an_error_naming_it(tmp_path, damage, message):
    path = tmp_path / "a.arrays"
    write_arrays(path, {"int64": ARRAYS["int64"], "uint8 odd": ARRAYS["uint8 odd"]})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as raised:
        read_arrays(path)
    assert str(path) in str(raised.value)


def test_arrays_of_python_objects_are_refused_naming_the_array(tmp_path):
    with pytest.raises(TypeError, match=r"'mixed' holds Python objects"):
        write_arrays(tmp_path / "a.arrays", {"mixed": np.array([1, "a", None], dtype=object)})
