import json

from robostream.cli import main
from robostream.synth import read_marker


def test_synth_and_inspect_end_to_end(tmp_path, capsys):
    root = tmp_path / "ds"
    assert main(["synth", str(root), "--episodes", "3", "--cameras", "2", "--height", "48", "--width", "64",
                 "--episode-length", "12", "--codec", "h264", "--gop", "30", "--video-file-mb", "0.002"]) == 0
    assert main(["inspect", str(root)]) == 0
    text = capsys.readouterr().out
    assert "3 episodes" in text and "h264 64x48" in text and "gop" in text
    assert main(["inspect", str(root), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cameras"]["observation.images.cam1"]["files"] >= 2


def test_synth_is_deterministic(tmp_path):
    args = ["--episodes", "2", "--cameras", "1", "--height", "48", "--width", "64", "--episode-length", "8"]
    for name in ("a", "b"):
        assert main(["synth", str(tmp_path / name), *args]) == 0
    for relative in ("data/chunk-000/file-000.parquet", "meta/tasks.parquet", "meta/info.json"):
        assert (tmp_path / "a" / relative).read_bytes() == (tmp_path / "b" / relative).read_bytes(), relative
    from robostream import LeRobotDataset

    a, b = (LeRobotDataset(root=tmp_path / n, return_uint8=True) for n in ("a", "b"))
    for i in range(len(a)):
        key = "observation.images.cam0"
        assert read_marker(a[i][key].numpy()) == read_marker(b[i][key].numpy())


def test_inspect_fails_clearly_on_a_broken_dataset(av1_root, tmp_path, capsys):
    from tests.conftest import copy_dataset

    root = copy_dataset(av1_root, tmp_path / "ds")
    victim = next((root / "videos").rglob("file-001.mp4"))
    victim.unlink()
    assert main(["inspect", str(root)]) == 2
    err = capsys.readouterr().err
    assert "robostream inspect: error:" in err and str(victim) in err and "missing" in err
    (root / "meta/info.json").write_text("{")
    assert main(["inspect", str(root)]) == 2
    assert "malformed JSON" in capsys.readouterr().err
