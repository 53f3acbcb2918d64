"""robostream/array_file.py: named arrays written and read back whole, in threads, and damage named."""

from __future__ import annotations

import ast
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


def test_reading_parses_nothing_with_ast(tmp_path, monkeypatch):
    """Python 3.11 < 3.11.8 fails ast parses in several threads at once now and then (gh-106905: CI failed when
    read-ahead threads np.load'ed packet indexes); every array a derived folder or a conversion holds is read here
    with ast made to fail (np.load's header parse would)."""
    write_arrays(tmp_path / "a.arrays", ARRAYS)
    monkeypatch.setattr(ast, "parse", _no_ast)
    monkeypatch.setattr(ast, "literal_eval", _no_ast)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: read_arrays(tmp_path / "a.arrays"), range(8)))
    for back in results:
        for name, array in ARRAYS.items():
            np.testing.assert_array_equal(back[name], array, err_msg=name)


def _no_ast(*args, **kwargs):
    raise AssertionError("an ast parse: not safe in threads on Python 3.11 < 3.11.8")


def _header(data: bytes, header: bytes) -> bytes:
    """The file with its header replaced (its length field too; the arrays' bytes follow it unaligned)."""
    end = 16 + int.from_bytes(data[8:16], "little")
    return data[:8] + len(header).to_bytes(8, "little") + header + data[end:]


def _edit(*replacements: bytes):
    """A damage: the header's text with each (old, new) pair of `replacements` replaced."""

    def damage(data: bytes) -> bytes:
        header = data[16 : 16 + int.from_bytes(data[8:16], "little")]
        for old, new in zip(replacements[::2], replacements[1::2]):
            assert old in header, old
            header = header.replace(old, new)
        return _header(data, header)

    return damage


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda data: data[:-1], "cut short"),
        (lambda data: data + b"\0", "its arrays end at byte"),
        (lambda data: b"NOTARRAY" + data[8:], "not an array file robostream wrote"),
        (lambda data: data[:4], "not an array file robostream wrote"),
        (lambda data: data[:8] + (1 << 40).to_bytes(8, "little") + data[16:], "its header ends at byte"),
        (_edit(b"[20]", b"[-1]"), "not a list of sizes"),
        (_edit(b"[20]", b"[10000000000000000000000]"), "not a list of sizes"),
        (_edit(b"[20]", b'"20"'), "not a list of sizes"),
        (_edit(b"[20]", b"[2.0]"), "not a list of sizes"),
        (_edit(b"[20]", b"[true]"), "not a list of sizes"),
        (_edit(b'"<i8"', b'"<x8"'), "not one write_arrays writes"),
        (_edit(b'"<i8"', b'"|O8"'), "not one write_arrays writes"),  # pointers made of the file's bytes
        (_edit(b'"<i8"', b'"(2,)<i4"'), "not one write_arrays writes"),  # numpy parses this one with ast
        (_edit(b'"<i8"', b"null"), "not one write_arrays writes"),
        (_edit(b'"<i8"', b'"<i4"'), "its arrays end at byte"),
        (_edit(b'"uint8 odd"', b'"int64"'), "not unique"),
        (_edit(b'["int64", ', b'["int64", 1, '), r"is not \[name, dtype, shape\]"),
        (_edit(b"[[", b"{[", b"]]", b"]}"), "damaged array file header"),
        (lambda data: _header(data, b'{"a": 1}'), "not a list of arrays"),
        (lambda data: _header(data, b"[" * 100_000 + b"]" * 100_000), "damaged array file header"),
    ],
    ids=[
        "cut",
        "extended",
        "magic",
        "tiny",
        "huge header length",
        "negative dimension",
        "huge dimension",
        "shape string",
        "float dimension",
        "bool dimension",
        "unknown dtype",
        "objects",
        "sub-array dtype",
        "no dtype",
        "smaller dtype",
        "repeated name",
        "entry arity",
        "json",
        "not a list",
        "deep nesting",
    ],
)
def test_a_damaged_file_is_an_error_naming_it(tmp_path, damage, message):
    path = tmp_path / "a.arrays"
    write_arrays(path, {"int64": ARRAYS["int64"], "uint8 odd": ARRAYS["uint8 odd"]})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as raised:
        read_arrays(path)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize(
    "array",
    [np.array([1, "a", None], dtype=object), np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8")])],
    ids=["objects", "fields"],
)
def test_arrays_of_other_than_plain_dtypes_are_refused_naming_the_array(tmp_path, array):
    with pytest.raises(TypeError, match=r"array 'mixed' is of dtype"):
        write_arrays(tmp_path / "a.arrays", {"mixed": array})
