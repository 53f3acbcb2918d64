import json
import subprocess
import sys

import pytest

from robostream.cli import main
from robostream.synth import read_marker
from tests.helpers import REPO


def test_synth_and_inspect_end_to_end(tmp_path, capsys):
    root = tmp_path / "ds"
    assert (
        main(
            [
                "synth",
                str(root),
                "--episodes",
                "3",
                "--cameras",
                "2",
                "--height",
                "48",
                "--width",
                "64",
                "--episode-length",
                "12",
                "--codec",
                "h264",
                "--gop",
                "30",
                "--video-file-mb",
                "0.002",
            ]
        )
        == 0
    )
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


def test_synth_depth_cameras(tmp_path, capfd):
    """`--depth 1`: a depth camera after the RGB one, lerobot's HEVC 12-bit stream holding the quantised depths."""
    import av
    import numpy as np

    from robostream.format.depth import codes_from_depths
    from robostream.synth import render_depth
    from robostream.writer.depth import LEROBOT_DEPTH_CODING

    root = tmp_path / "ds"
    assert (
        main(
            [
                "synth",
                str(root),
                "--episodes",
                "1",
                "--cameras",
                "1",
                "--height",
                "48",
                "--width",
                "64",
                "--episode-length",
                "6",
                "--codec",
                "h264",
                "--depth",
                "1",
            ]
        )
        == 0
    )
    info = json.loads((root / "meta/info.json").read_text())
    feature = info["features"]["observation.images.depth0"]
    assert feature["shape"] == [48, 64, 1] and feature["info"]["is_depth_map"] is True
    assert feature["info"]["depth_unit"] == "m" and feature["info"]["video.codec"] == "hevc"
    with av.open(str(root / "videos/observation.images.depth0/chunk-000/file-000.mp4")) as container:
        codes = np.stack([f.to_ndarray(format="gray12le") for f in container.decode(video=0)])
    length = info["total_frames"]
    np.testing.assert_array_equal(
        codes, codes_from_depths(render_depth(0, 0, length, 48, 64)[..., 0], LEROBOT_DEPTH_CODING)
    )
    assert "x265 [info]" not in capfd.readouterr().err  # x265's banner (written to fd 2) is silenced
    assert main(["synth", str(tmp_path / "bad"), "--depth", "1", "--depth-block", "video_info"]) == 2
    assert "depth_block='video_info' is a v2.x spelling" in capfd.readouterr().err


def test_inspect_fails_clearly_on_a_broken_dataset(av1_root, tmp_path, capsys):
    from tests.helpers import copy_tree

    root = copy_tree(av1_root, tmp_path / "ds")
    victim = next((root / "videos").rglob("file-001.mp4"))
    victim.unlink()
    assert main(["inspect", str(root)]) == 2
    err = capsys.readouterr().err
    assert "robostream inspect: error:" in err and str(victim) in err and "missing" in err
    (root / "meta/info.json").write_text("{")
    assert main(["inspect", str(root)]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_version(capsys):
    import robostream

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"robostream {robostream.__version__}"


def _synth_stderr(tmp_path, name: str, terminal: bool) -> str:
    """stderr of `robostream synth` on a pseudo-terminal (terminal=True) or a pipe."""
    import sys

    return _stderr(
        [
            sys.executable,
            "-m",
            "robostream.cli",
            "synth",
            str(tmp_path / name),
            "--episodes",
            "3",
            "--cameras",
            "1",
            "--height",
            "48",
            "--width",
            "64",
            "--episode-length",
            "4",
            "--jobs",
            "1",
        ],
        terminal,
    )


def _stderr(args: list[str], terminal: bool) -> str:
    """stderr of a command run on a pseudo-terminal (terminal=True) or a pipe."""
    import os
    import pty
    import subprocess

    if not terminal:
        return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stderr
    controller, terminal_fd = pty.openpty()
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=terminal_fd, timeout=120, check=True)
    os.close(terminal_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_synth_shows_progress_on_a_terminal_and_nothing_in_logs(tmp_path):
    assert "synth: episodes" in _synth_stderr(tmp_path, "tty", terminal=True)
    assert "synth: episodes" not in _synth_stderr(tmp_path, "pipe", terminal=False)


def test_inspect_shows_what_it_does_on_a_terminal_and_nothing_in_logs(av1_root):
    import sys

    args = [sys.executable, "-m", "robostream.cli", "inspect", str(av1_root)]
    assert "inspect: reading the metadata" in _stderr(args, terminal=True)
    assert "inspect: reading" not in _stderr(args, terminal=False)


def test_train_without_lerobot_says_what_to_install(capsys):
    """`robostream train` hands its flags to lerobot's parser; where lerobot is missing (this environment's pins
    have none) it fails naming what to install, not with a traceback."""
    try:
        import lerobot  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("lerobot is installed here: tests/lerobot_train runs the command")
    assert main(["train", "--policy.type=act"]) == 2
    err = capsys.readouterr().err
    assert "robostream train: error: needs lerobot 0.6 and accelerate" in err and "lerobot[training]" in err


def test_building_the_command_line_imports_no_torch():
    """Every `robostream` command builds the whole parser first: convert, verify and inspect must not pay for
    torch's import there (seconds of every run; the benchmark's arguments live apart from its loaders)."""
    code = "import json, sys; from robostream.cli import build_parser; build_parser(); print(json.dumps(list(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = set(json.loads(done.stdout))
    assert "torch" not in imported and "robostream.bench.command" not in imported
