"""Arrow columns as numpy without Array.to_numpy (which imports pandas: ~0.3 s of CPU in each fresh worker)."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from robostream.format.arrow_values import arrow_values


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.float16])
def test_numbers_equal_arrows_own_conversion_also_sliced_and_chunked(dtype):
    values = np.arange(40).astype(dtype)
    array = pa.array(values)
    for part in (array, array.slice(7, 20), array.slice(40)):
        got = arrow_values(part)
        assert got.dtype == np.dtype(dtype) and np.array_equal(got, part.to_numpy())
    chunked = pa.chunked_array([array.slice(0, 9), array.slice(9)])
    assert np.array_equal(arrow_values(chunked), values)


def test_booleans_unpacked_from_their_bits_at_any_offset():
    flags = np.random.default_rng(0).random(37) < 0.5
    array = pa.array(flags)
    assert np.array_equal(arrow_values(array), flags)
    assert np.array_equal(arrow_values(array.slice(5, 23)), flags[5:28])


def test_nulls_and_non_numbers_are_refused():
    with pytest.raises(ValueError, match="1 null value"):
        arrow_values(pa.array([1.0, None, 3.0]))
    with pytest.raises(ValueError, match="not numbers"):
        arrow_values(pa.array(["a", "b"]))


def test_reading_samples_never_imports_pandas(av1_root):
    # A fresh process reading rows (streaming and map-style) must not pay pandas' import, which pyarrow's
    # to_numpy triggers: every DataLoader worker of every epoch would.
    code = (
        "import sys\n"
        "from robostream import LeRobotDataset, StreamingLeRobotDataset\n"
        f"next(iter(StreamingLeRobotDataset(root={str(av1_root)!r})))\n"
        f"LeRobotDataset(root={str(av1_root)!r})[3]\n"
        "assert 'pandas' not in sys.modules, [m for m in sys.modules if m.startswith('pandas')][:3]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
