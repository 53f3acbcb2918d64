from pathlib import Path

import pytest

from robostream.errors import UnsafePathError
from robostream.format.paths import DEFAULT_VIDEO_PATH, render_template
from robostream.storage.paths import check_relative, local_path


@pytest.mark.parametrize(
    "bad", ["../x.parquet", "data/../../etc/passwd", "/etc/passwd", "C:/x", "data\\x", "s3://bucket/x", ""]
)
def test_unsafe_paths_are_refused_with_the_value_named(bad):
    with pytest.raises(UnsafePathError) as err:
        check_relative(bad, what="info.json data_path")
    assert "info.json data_path" in str(err.value)


def test_templates_render_and_values_cannot_escape():
    path = render_template(
        DEFAULT_VIDEO_PATH, what="t", video_key="observation.images.top", chunk_index=1, file_index=12
    )
    assert path == "videos/observation.images.top/chunk-001/file-012.mp4"
    with pytest.raises(UnsafePathError):
        render_template(DEFAULT_VIDEO_PATH, what="t", video_key="../../outside", chunk_index=0, file_index=0)


def test_local_path_stays_under_root(tmp_path):
    (tmp_path / "link").symlink_to("/")
    assert local_path(tmp_path, "data/a.parquet", what="t") == tmp_path.resolve() / "data/a.parquet"
    with pytest.raises(UnsafePathError, match="outside the dataset root"):
        local_path(tmp_path, "link/etc/passwd", what="t")


def _hub_cache_snapshot(cache: Path) -> Path:
    """A folder laid out like huggingface_hub's cache: every snapshot file a symlink to ../../blobs/<hash>."""
    repo = cache / "datasets--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "0a1b2c").write_text("{}")
    snapshot = repo / "snapshots" / ("f" * 40)
    (snapshot / "meta").mkdir(parents=True)
    (snapshot / "meta" / "info.json").symlink_to("../../../blobs/0a1b2c")
    return snapshot


def test_hub_cache_snapshot_links_into_its_blobs_are_inside(tmp_path):
    snapshot = _hub_cache_snapshot(tmp_path)
    assert local_path(snapshot, "meta/info.json", what="t").read_text() == "{}"
    # ...but only into the blobs folder itself: a link out of the cache is still an escape.
    (snapshot / "meta" / "tasks.parquet").symlink_to("/etc/passwd")
    (tmp_path / "datasets--org--name" / "blobs" / "up").symlink_to("/etc/passwd")
    (snapshot / "meta" / "stats.json").symlink_to("../../../blobs/up")
    for name in ("tasks.parquet", "stats.json"):
        with pytest.raises(UnsafePathError, match="outside the dataset root"):
            local_path(snapshot, f"meta/{name}", what="t")


def test_a_folder_named_snapshots_without_blobs_gets_no_exception(tmp_path):
    root = tmp_path / "snapshots" / "x"
    root.mkdir(parents=True)
    (tmp_path / "secret").write_text("s")
    (root / "info.json").symlink_to("../../secret")
    with pytest.raises(UnsafePathError):
        local_path(root, "info.json", what="t")
