"""Opt-in: lerobot 0.6.1 reads `robostream transcode`'s output.

The AV1 fixture (2 cameras, several files per camera) transcoded to H.264 and to HEVC (GOP 4, no B-frames): lerobot's
LeRobotDataset (tests/compat/lerobot_dump.py, in lerobot's interpreter) loads each output and returns, at every
episode's edges, with and without windows and an episode subset, what robostream's LeRobotDataset returns from the
same files (test_lerobot_compat.py's comparison). lerobot also rebuilds each re-encoded camera's encoder config
from the info.json transcode wrote (`encoder_config_from_video_info`, which checks the options with PyAV), as its
dataset tools do before re-encoding.

Enable with ROBOSTREAM_LEROBOT_PYTHON (see test_lerobot_compat.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robostream.convert.transcode import transcode
from tests.compat.test_lerobot_compat import SPEC_NAMES, SYNTH_DELTA, _compare, _dump, _episode_lengths, _report, _specs
from tests.lerobot_env import run

CODECS = ("h264", "hevc")
CAMERAS = ("observation.images.cam0", "observation.images.cam1")
# In lerobot's interpreter: each re-encoded camera's config rebuilt from info.json; prints (vcodec, g) per camera.
REBUILD = """
import json, sys
from lerobot.configs.video import encoder_config_from_video_info
for root in sys.argv[1:]:
    features = json.load(open(root + "/meta/info.json"))["features"]
    configs = [encoder_config_from_video_info(features[k]["info"]) for k in %r]
    print(json.dumps([[c.vcodec, c.g] for c in configs]))
""" % (CAMERAS,)


@pytest.fixture(scope="module")
def transcoded(av1_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("transcode_compat")
    outputs = {codec: tmp / codec for codec in CODECS}
    for codec, out in outputs.items():
        transcode(av1_root, out=out, codec=codec, gop=4, log=lambda line: None)  # type: ignore[arg-type]
    return outputs


@pytest.fixture(scope="module")
def dumped(lerobot_python: str, hf_home: Path, transcoded: dict[str, Path]) -> dict[str, dict]:
    sides = {}
    for codec, root in transcoded.items():
        specs = _specs(_episode_lengths(root), SYNTH_DELTA, [6, 2])
        sides[codec] = _dump(lerobot_python, hf_home, root, root.parent / f"{codec}.npz", specs)
    return sides


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_lerobot_reads_the_transcoded_dataset_as_robostream_does(dumped: dict[str, dict], codec: str, name: str):
    side = dumped[codec]
    assert side["meta"][name]["len"] > 0
    problems = _compare(side, name)
    assert not problems, _report(problems, side, name)


def test_lerobot_rebuilds_the_encoder_config_from_the_new_info(
    lerobot_python: str, hf_home: Path, transcoded: dict[str, Path]
):
    printed = run(lerobot_python, hf_home, ["-c", REBUILD, *(str(transcoded[c]) for c in CODECS)])
    rebuilt = [json.loads(line) for line in printed.strip().splitlines()]
    assert rebuilt == [[[codec, 4]] * len(CAMERAS) for codec in CODECS]
