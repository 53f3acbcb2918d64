"""Opt-in: depth cameras as lerobot 0.6.1 writes and reads them (HEVC gray12le lossless, log-quantised).

lerobot_depth.py writes, with lerobot's own writer, 5 episodes (odd and even lengths) with 2 RGB cameras, a depth
camera (float32 metres, some below depth_min and above depth_max), a `string` feature and lerobot-annotate's
language columns, over 2 video files per camera (episodes start mid-file, on odd frames of the open-GOP HEVC
stream, and the cameras roll over at different episodes), then dumps what lerobot's LeRobotDataset returns at every
position: depth in "mm" (lerobot's default) and "m", with and without a window on the depth camera (padded at the
episode edges), every other key, RGB as float and as uint8 (return_uint8), and meta.stats after lerobot's
rescale_depth_stats for both units.

robostream must return the same: depth float32 (1, H, W) or (T, 1, H, W) bit for bit (torch.equal: the same PyAV
decoder and lerobot's dequantisation), the same `_is_pad`, strings and language values, RGB bit for bit when both
decode with torchcodec (else within NON_TORCHCODEC_ATOL), the same stats; from map-style samples, streaming samples,
whole loader batches (0 and 2 workers), a 2-source mixture and a slow HTTP store. In lerobot's interpreter,
lerobot's own `lerobot_collate_fn` collates robostream's samples as it collates its own.

Enable with ROBOSTREAM_LEROBOT_PYTHON (see test_lerobot_compat.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from robostream import LeRobotDataset, Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset
from tests.compat.test_lerobot_compat import HERE, NON_TORCHCODEC_ATOL
from tests.lerobot_env import run

DEPTH = "observation.images.depth"
IS_PAD = f"{DEPTH}_is_pad"
RGB = ("observation.images.front", "observation.images.wrist")
LANGUAGE = ("language_persistent", "language_events")
WINDOW = [-0.1, 0.0, 0.1]  # lerobot_depth.py's window on the depth camera (fps 10: the frames before and after)
UNITS = ["mm", "m"]


@pytest.fixture(scope="module")
def reference(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("lerobot_depth")
    root = tmp / "ds"
    # one lerobot process (its import is most of the time): write, annotate, dump, then collate robostream's samples
    run(
        lerobot_python,
        hf_home,
        [
            str(HERE / "lerobot_depth.py"),
            str(root),
            "--write",
            "--annotate",
            "--dump",
            str(tmp / "reference"),
            "--collate",
            str(tmp / "collate.json"),
            "--hf-home",
            str(hf_home),
        ],
        PYTHONPATH=f"{HERE}:{HERE.parents[1]}",
    )
    with np.load(tmp / "reference.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads((tmp / "reference.json").read_text())
    assert meta["window"] == WINDOW and meta["depth_key"] == DEPTH and tuple(meta["rgb_keys"]) == RGB
    return {
        "root": root,
        "arrays": arrays,
        "len": meta["len"],
        "backend": meta["video_backend"],
        "dtypes": meta["dtypes"],
        "strings": {int(i): v for i, v in meta["strings"].items()},
        "language": {int(i): v for i, v in meta["language"].items()},
        "collate": json.loads((tmp / "collate.json").read_text()),
    }


def exact_rgb(reference: dict) -> bool:
    """RGB frames are compared bit for bit when both packages decode them with torchcodec."""
    from robostream.video.decoder import default_backend

    return reference["backend"] == "torchcodec" and default_backend() == "torchcodec"


def expected(reference: dict, config: str, index: int, key: str) -> torch.Tensor:
    return torch.from_numpy(reference["arrays"][f"{config}/{index}/{key}"])


def differences(got: torch.Tensor, want: torch.Tensor) -> str:
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"dtype/shape {got.dtype} {tuple(got.shape)} vs lerobot's {want.dtype} {tuple(want.shape)}"
    diff = (got.double() - want.double()).abs()
    where = tuple(int(i) for i in torch.nonzero(diff)[0]) if bool((diff > 0).any()) else None
    return (
        f"{int((diff > 0).sum())}/{diff.numel()} elements differ, max |d| {float(diff.max()):.6g}; first at "
        f"{where}: robostream {got[where].item() if where else None!r} vs lerobot "
        f"{want[where].item() if where else None!r}"
    )


def lerobot_keys(reference: dict, config: str) -> set[str]:
    """The keys of lerobot's samples in a configuration (tensors, strings and language columns)."""
    strings = next(iter(reference["strings"].values()))
    language = next(iter(reference["language"].values()), {})
    return set(reference["dtypes"][config]) | set(strings) | set(language)


def assert_like_lerobot(
    sample: dict, reference: dict, *, unit: str = "mm", window: bool = False, uint8: bool = False, where: str = ""
) -> None:
    """Every key lerobot returns, equal: the depth camera of lerobot's configuration (unit, window, uint8), the rest
    from its "mm" dump (nothing else depends on the depth unit or the depth window), RGB from its uint8 dump with
    return_uint8."""
    index = int(sample["index"])
    config = "uint8" if uint8 else f"{unit}_window" if window else unit
    at = f"{where} [{config} index {index}]"
    missing = lerobot_keys(reference, config) - set(sample)
    assert not missing, f"{at}: keys lerobot returns that robostream lacks: {sorted(missing)}"
    depth, want = sample[DEPTH], expected(reference, config, index, DEPTH)
    assert isinstance(depth, torch.Tensor) and depth.dtype == torch.float32, (
        f"{at} {DEPTH}: {type(depth)} {getattr(depth, 'dtype', None)}"
    )
    assert torch.equal(depth, want), f"{at} {DEPTH}: {differences(depth, want)}"
    if window:
        assert torch.equal(sample[IS_PAD], expected(reference, config, index, IS_PAD)), (
            f"{at} {IS_PAD}: {sample[IS_PAD]} vs {expected(reference, config, index, IS_PAD)}"
        )
    for key, value in reference["strings"][index].items():
        assert sample[key] == value, f"{at} {key}: {sample[key]!r} vs lerobot's {value!r}"
    for key, value in reference["language"].get(index, {}).items():
        assert sample[key] == value, f"{at} {key}"
    for key, dtype in reference["dtypes"]["mm"].items():
        if key == DEPTH:
            continue
        got = sample[key]
        want = expected(reference, "uint8" if uint8 and key in RGB else "mm", index, key)
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape, (
            f"{at} {key}: {differences(got, want) if isinstance(got, torch.Tensor) else type(got)}"
        )
        if key in RGB and not exact_rgb(reference):
            scale = 255 if uint8 else 1
            assert float((got.double() - want.double()).abs().max()) <= NON_TORCHCODEC_ATOL * scale, (
                f"{at} {key}: {differences(got, want)}"
            )
        else:
            assert torch.equal(got, want), f"{at} {key}: {differences(got, want)}"


# -- the reference itself -----------------------------------------------------------------------------------------
def test_the_lerobot_dataset_exercises_depth(reference):
    """Guard: 2 video files per camera, episodes starting mid-file, clamped depths in both directions, odd and even
    episode lengths, lerobot's own output dtypes and units."""
    import pyarrow.parquet as pq

    root = reference["root"]
    info = json.loads((root / "meta" / "info.json").read_text())["features"][DEPTH]
    assert info["info"]["is_depth_map"] and info["info"]["depth_unit"] == "m"
    assert (info["info"]["video.codec"], info["info"]["video.pix_fmt"]) == ("hevc", "gray12le")
    episodes = pq.read_table(root / "meta" / "episodes").to_pandas()
    for camera in (*RGB, DEPTH):
        assert len(list((root / "videos" / camera).rglob("*.mp4"))) >= 2, camera
        assert (episodes[f"videos/{camera}/from_timestamp"] > 0).any(), f"{camera}: no episode starts mid-file"
    assert len(list((root / "data").rglob("*.parquet"))) >= 2
    assert {n % 2 for n in episodes["length"]} == {0, 1}
    assert reference["dtypes"]["mm"][DEPTH] == reference["dtypes"]["uint8"][DEPTH] == "torch.float32"
    assert reference["dtypes"]["uint8"][RGB[0]] == "torch.uint8"
    mm = np.stack([reference["arrays"][f"mm/{i}/{DEPTH}"] for i in range(reference["len"])])
    m = np.stack([reference["arrays"][f"m/{i}/{DEPTH}"] for i in range(reference["len"])])
    assert mm.min() == 10.0 and mm.max() == 10000.0 and np.array_equal(mm, np.round(mm))  # clamped, whole mm
    assert m.max() == 10.0 and abs(float(m.min()) - 0.01) < 1e-6
    assert len(np.unique(mm)) > 1000
    for i in range(reference["len"]):  # lerobot's frame is the asked one: its (episode, frame) marks, clamped
        episode, frame = (int(reference["arrays"][f"mm/{i}/{k}"]) for k in ("episode_index", "frame_index"))
        assert mm[i, 0, 0, 4 + frame % 4] == 10000.0 and mm[i, 0, 0, 9 + episode % 3] == 10.0, i
    window_pads = [reference["arrays"][f"m_window/{i}/{IS_PAD}"].tolist() for i in range(reference["len"])]
    assert [True, False, False] in window_pads and [False, False, True] in window_pads
    assert len(reference["language"]) == reference["len"]


# -- map-style ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [False, True], ids=["frame", "window"])
@pytest.mark.parametrize("unit", UNITS)
def test_depth_map_style_samples_equal_lerobots(reference, unit, window):
    dataset = LeRobotDataset(
        root=reference["root"], depth_output_unit=unit, delta_timestamps={DEPTH: WINDOW} if window else None
    )
    assert len(dataset) == reference["len"]
    config = f"{unit}_window" if window else unit
    for position in np.random.default_rng(len(config)).permutation(len(dataset)).tolist():  # seeks, not a scan
        sample = dataset[position]
        extra = set(sample) - lerobot_keys(reference, config)
        assert not extra, f"[{config} {position}] keys only robostream returns: {sorted(extra)}"
        assert_like_lerobot(sample, reference, unit=unit, window=window, where="map-style")


def test_depth_default_unit_is_lerobots_mm(reference):
    dataset = LeRobotDataset(root=reference["root"])
    for position in (0, 9, len(dataset) - 1):
        assert_like_lerobot(dataset[position], reference, unit="mm", where="default unit")


@pytest.mark.parametrize("unit", UNITS)
def test_depth_stats_are_rescaled_like_lerobots(reference, unit):
    """meta.stats after lerobot's rescale_depth_stats (depth stats x1000 for mm, count kept; from the raw frames,
    so min 0 and max 50 m although samples are clamped to [0.01, 10] m), every other feature's as stored."""
    prefix = f"stats/{unit}/"
    want: dict[str, dict[str, np.ndarray]] = {}
    for name, value in reference["arrays"].items():
        if name.startswith(prefix):
            key, stat = name[len(prefix) :].rsplit("/", 1)
            want.setdefault(key, {})[stat] = value
    assert float(want[DEPTH]["max"].max()) == {"mm": 50000.0, "m": 50.0}[unit]
    for which, dataset in (
        ("map-style", LeRobotDataset(root=reference["root"], depth_output_unit=unit)),
        ("streaming", StreamingLeRobotDataset(root=reference["root"], depth_output_unit=unit)),
    ):
        got = dataset.meta.stats
        assert sorted(got) == sorted(want), which
        for key, stats in want.items():
            assert sorted(got[key]) == sorted(stats), (which, key)
            for stat, value in stats.items():
                mine = np.asarray(got[key][stat])
                assert mine.shape == value.shape and np.array_equal(mine, value), (
                    f"{which} stats[{key!r}][{stat!r}]: {mine.ravel()[:4]} vs lerobot's {value.ravel()[:4]}"
                )


def test_depth_return_uint8_gives_uint8_rgb_and_float32_depth(reference):
    dataset = LeRobotDataset(root=reference["root"], return_uint8=True)
    for position in range(len(dataset)):
        sample = dataset[position]
        assert all(sample[key].dtype == torch.uint8 for key in RGB) and sample[DEPTH].dtype == torch.float32
        assert_like_lerobot(sample, reference, uint8=True, where="map-style return_uint8")


# -- streaming ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [False, True], ids=["frame", "window"])
@pytest.mark.parametrize("unit", UNITS)
def test_depth_streaming_samples_equal_lerobots(reference, unit, window):
    dataset = StreamingLeRobotDataset(
        root=reference["root"],
        depth_output_unit=unit,
        shuffle=False,
        delta_timestamps={DEPTH: WINDOW} if window else None,
    )
    seen = list(dataset)
    assert sorted(int(s["index"]) for s in seen) == list(range(reference["len"]))
    for sample in seen:
        assert_like_lerobot(sample, reference, unit=unit, window=window, where="streaming")


@pytest.mark.parametrize("workers", [0, 2])
def test_depth_loader_batches_hold_lerobots_values(reference, workers):
    """Whole batches: depth (B, 1, H, W) or (B, T, 1, H, W) float32 rows equal lerobot's samples; uint8 RGB;
    strings as lists."""
    for unit, window in (("m", False), ("mm", True)):
        dataset = StreamingLeRobotDataset(
            root=reference["root"],
            depth_output_unit=unit,
            return_uint8=True,
            seed=3,
            delta_timestamps={DEPTH: WINDOW} if window else None,
        )
        batches = list(StreamingDataLoader(dataset, batch_size=8, num_workers=workers))
        indices = [int(i) for b in batches for i in b["index"]]
        assert sorted(indices) == list(range(reference["len"]))
        config = f"{unit}_window" if window else unit
        for batch in batches:
            rows = [int(i) for i in batch["index"]]
            want = torch.stack([expected(reference, config, i, DEPTH) for i in rows])
            assert batch[DEPTH].dtype == torch.float32 and torch.equal(batch[DEPTH], want), (
                f"workers={workers} {config} rows {rows}: {differences(batch[DEPTH], want)}"
            )
            if window:
                assert torch.equal(batch[IS_PAD], torch.stack([expected(reference, config, i, IS_PAD) for i in rows]))
            assert list(batch["note"]) == [reference["strings"][i]["note"] for i in rows]
            assert list(batch["task"]) == [reference["strings"][i]["task"] for i in rows]
            for key in LANGUAGE:
                assert batch[key] == [reference["language"][i][key] for i in rows], key
            for key in RGB:
                want_rgb = torch.stack([expected(reference, "uint8", i, key) for i in rows])
                assert batch[key].dtype == torch.uint8
                if exact_rgb(reference):
                    assert torch.equal(batch[key], want_rgb), f"{key}: {differences(batch[key], want_rgb)}"


def test_depth_two_source_mixture_equals_lerobots(reference):
    mixture = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=reference["root"]), Source(root=reference["root"])]),
        depth_output_unit="m",
        seed=1,
    )
    seen = list(mixture)
    assert sorted(int(s["dataset_index"]) for s in seen) == [0] * reference["len"] + [1] * reference["len"]
    for sample in seen:
        assert_like_lerobot(sample, reference, unit="m", where=f"mixture source {int(sample['dataset_index'])}")


def test_depth_over_a_slow_store_equals_lerobots(reference, monkeypatch):
    """The same dataset read over HTTP ranges from a store with latency and a cap on requests in flight."""
    from tests.remote.servers import RangeHTTPServer

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with RangeHTTPServer(reference["root"], latency_s=0.01, max_in_flight=3) as store:
        streamed = list(
            StreamingLeRobotDataset(root=store.url, seed=2, depth_output_unit="mm", delta_timestamps={DEPTH: WINDOW})
        )
        mapped = LeRobotDataset(root=store.url, depth_output_unit="m")
        for position in (0, 9, 20, len(mapped) - 1):
            assert_like_lerobot(mapped[position], reference, unit="m", where="map-style over HTTP")
        assert float(np.asarray(mapped.meta.stats[DEPTH]["max"]).max()) == 50.0
    assert sorted(int(s["index"]) for s in streamed) == list(range(reference["len"]))
    for sample in streamed:
        assert_like_lerobot(sample, reference, unit="mm", window=True, where="streaming over HTTP")


# -- lerobot's collate ----------------------------------------------------------------------------------------------
def test_depth_lerobots_collate_takes_robostreams_samples(reference):
    """In lerobot's interpreter: lerobot_collate_fn over robostream's map-style samples equals it over lerobot's
    ("mm"; and "m" with the depth window), at episode edges, odd frames and mid-file starts."""
    results = reference["collate"]
    assert "error" not in results, f"robostream's samples in lerobot's interpreter:\n{results.get('error')}"
    assert sorted(results) == ["m_window", "mm"]
    for name, result in results.items():
        assert result["equal"], (name, result)
        assert DEPTH in result["keys"] and "note" in result["keys"], (name, result["keys"])
