import pytest

from robostream.errors import UnsafePathError
from robostream.format.paths import DEFAULT_VIDEO_PATH, render_template
from robostream.storage.paths import check_relative, local_path


@pytest.mark.parametrize("bad", ["../x.parquet", "data/../../etc/passwd", "/etc/passwd", "C:/x", "data\\x",
                                 "s3://bucket/x", ""])
def test_unsafe_paths_are_refused_with_the_value_named(bad):
    with pytest.raises(UnsafePathError) as err:
        check_relative(bad, what="info.json data_path")
    assert "info.json data_path" in str(err.value)


def test_templates_render_and_values_cannot_escape():
    path = render_template(DEFAULT_VIDEO_PATH, what="t", video_key="observation.images.top", chunk_index=1,
                           file_index=12)
    assert path == "videos/observation.images.top/chunk-001/file-012.mp4"
    with pytest.raises(UnsafePathError):
        render_template(DEFAULT_VIDEO_PATH, what="t", video_key="../../outside", chunk_index=0, file_index=0)


def test_local_path_stays_under_root(tmp_path):
    (tmp_path / "link").symlink_to("/")
    assert local_path(tmp_path, "data/a.parquet", what="t") == tmp_path.resolve() / "data/a.parquet"
    with pytest.raises(UnsafePathError, match="outside the dataset root"):
        local_path(tmp_path, "link/etc/passwd", what="t")
