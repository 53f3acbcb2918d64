"""Arrow columns as numpy without Array.to_numpy (which imports pandas: ~0.3 s of CPU in each fresh worker)."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robostream.format.arrow_values import arrow_values, boolean_array
from robostream.format.metadata import load_metadata
from tests.helpers import copy_tree


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


def test_boolean_masks_equal_arrows_own_at_any_length():
    for n in (0, 1, 7, 8, 9, 64, 131):
        values = np.random.default_rng(n).random(n) < 0.5
        assert boolean_array(values).equals(pa.array(values, type=pa.bool_()))


@pytest.mark.parametrize("row_group_size", [None, 1000], ids=["group_per_episode", "episodes_per_group"])
def test_reading_samples_never_imports_pandas(av1_root, tmp_path, row_group_size):
    # A fresh process reading rows (streaming and map-style) must not pay pandas' import, which pyarrow's to_numpy
    # and pa.array trigger: every DataLoader worker of every epoch would. A converted dataset's row groups hold
    # several episodes, whose rows are filtered.
    root = av1_root
    if row_group_size:
        root = copy_tree(av1_root, tmp_path / "ds")
        for path in sorted(root.glob("data/*/*.parquet")):
            pq.write_table(pq.read_table(path), path, row_group_size=row_group_size)
        assert pq.ParquetFile(path).metadata.num_row_groups < len(load_metadata(root).episodes.episode_index)
    code = (
        "import sys\n"
        "from robostream import LeRobotDataset, StreamingLeRobotDataset\n"
        f"next(iter(StreamingLeRobotDataset(root={str(root)!r})))\n"
        f"LeRobotDataset(root={str(root)!r})[3]\n"
        "assert 'pandas' not in sys.modules, [m for m in sys.modules if m.startswith('pandas')][:3]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
