"""Per-stage tasks, busy time and wait of a streaming epoch (datasets/stages.py), in process and through DataLoader
workers, locally and over the slow store, and of a map-style epoch through DataLoader workers: every stage that ran
counted, the decoder calls counted as made, waits within the loops' wall time, and the store's round trips showing
in the remote stages (bounds the latency implies, never a timing threshold a loaded machine could miss)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from robostream import LeRobotDataset, StreamingDataLoader, StreamingLeRobotDataset
from robostream.datasets.stages import STAGES, TIMED, StagePool, StageTimes
from robostream.process_local import ProcessLocal
from robostream.synth import generate
from robostream.testing.slow_store import RangeHTTPServer
from tests.helpers import SMALL_H264_CONFIG

CONFIG = dataclasses.replace(SMALL_H264_CONFIG, seed=5)
WINDOWS = {"observation.images.cam0": [-0.1, 0.0]}
BATCH = 5
LATENCY_S = 0.05


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("stages") / "d", CONFIG)


def _epoch(root: str, workers: int) -> tuple[StreamingLeRobotDataset, int, float]:
    """A whole epoch: the dataset, its batches and the epoch's wall time."""
    dataset = StreamingLeRobotDataset(root=root, delta_timestamps=WINDOWS, return_uint8=True, seed=2)
    started = time.perf_counter()
    batches = sum(1 for _ in StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers))
    return dataset, batches, time.perf_counter() - started


def _check_stages(counts: dict[str, int], *, batches: int, workers: int, wall_s: float, remote: bool) -> None:
    ran = ["rows", "decode", "assemble", *(["index"] if remote else [])]
    for stage in ran:
        assert counts[f"{stage}_tasks"] > 0 and counts[f"{stage}_busy_us"] > 0, stage
        assert counts[f"{stage}_threads"] >= 1, stage
    for stage in set(TIMED) - set(ran):
        assert counts[f"{stage}_tasks"] == counts[f"{stage}_busy_us"] == counts[f"{stage}_wait_us"] == 0, stage
    assert counts["assemble_tasks"] == batches  # one assembly per batch
    assert counts["rows_tasks"] >= CONFIG.episodes  # every episode's rows read, once per piece
    # The loops wait inside their own time, and each loop runs within the epoch.
    loops_us = counts["worker_wall_us"]
    assert 0 < loops_us <= max(1, workers) * wall_s * 1e6
    assert sum(counts[f"{stage}_wait_us"] for stage in TIMED) <= loops_us
    # In the loop (rows read locally, assembly) waiting is doing: wait equals busy.
    assert counts["assemble_wait_us"] == counts["assemble_busy_us"]
    if not remote:
        assert counts["rows_wait_us"] == counts["rows_busy_us"]
        assert counts["fetch_tasks"] == counts["fetch_busy_us"] == counts["read_wait_us"] == 0


def test_an_epoch_in_process_counts_every_stage_and_each_decoder_call(root):
    dataset, batches, wall_s = _epoch(str(root), 0)
    counts = dataset.frame_counts()
    _check_stages(counts, batches=batches, workers=0, wall_s=wall_s, remote=False)
    decoders = dataset.reading.decoders.stats()  # this process's decoders: each borrowing is one decoder call
    assert counts["decode_tasks"] == decoders["hits"] + decoders["misses"] == decoders["decoder_calls"]


def test_an_epoch_through_workers_sums_their_stages(root):
    dataset, batches, wall_s = _epoch(str(root), 2)
    counts = dataset.frame_counts()
    _check_stages(counts, batches=batches, workers=2, wall_s=wall_s, remote=False)
    # Every worker decodes its own pieces: at least one call per camera each.
    assert counts["decode_tasks"] >= 2 * CONFIG.cameras


def test_the_slow_stores_round_trips_show_in_the_remote_stages(root):
    local = _epoch(str(root), 0)[0].frame_counts()
    with RangeHTTPServer(root, latency_s=LATENCY_S) as store:
        dataset, batches, wall_s = _epoch(store.url, 0)
    counts = dataset.frame_counts()
    _check_stages(counts, batches=batches, workers=0, wall_s=wall_s, remote=True)
    latency_us = LATENCY_S * 1e6
    assert counts["fetch_tasks"] > 0 and local["fetch_tasks"] == 0  # the store's requests
    # Each request waits out the latency before its first byte: fetch is busy at least that long per request.
    assert counts["fetch_busy_us"] >= counts["fetch_tasks"] * latency_us and counts["fetch_threads"] >= 1
    # A camera file's packet index needs its first bytes (a round trip), and the loop waits for the first ones.
    assert counts["index_tasks"] > 0 and counts["index_busy_us"] >= counts["index_tasks"] * latency_us
    assert counts["index_wait_us"] >= latency_us > local["index_wait_us"]
    # The first data file's footer is a round trip away, read in the row pool (16 threads) ahead of its piece.
    assert counts["rows_busy_us"] >= latency_us and counts["rows_threads"] > 1


def test_a_map_style_epoch_through_workers_counts_its_decoder_calls_and_one_assembly_per_batch(root):
    dataset = LeRobotDataset(root=str(root), delta_timestamps=WINDOWS, return_uint8=True)
    started = time.perf_counter()
    batches = sum(1 for _ in DataLoader(dataset, batch_size=BATCH, num_workers=2))  # __getitems__ per batch
    wall_s = time.perf_counter() - started
    counts = dataset.reading.counters.totals()
    assert counts["decode_tasks"] > 0 and counts["decode_busy_us"] > 0 and counts["decode_threads"] >= 1
    assert counts["assemble_tasks"] == batches == -(-len(dataset) // BATCH)
    assert counts["assemble_wait_us"] == counts["assemble_busy_us"] > 0  # assembled in the loop
    loops_us = counts["worker_wall_us"]
    assert 0 < loops_us <= 2 * wall_s * 1e6
    assert sum(counts[f"{stage}_wait_us"] for stage in TIMED) <= loops_us
    assert counts["fetch_tasks"] == counts["fetch_busy_us"] == 0  # local


def test_stage_times_publish_what_is_new_in_whole_microseconds():
    times = ProcessLocal(StageTimes)
    with StagePool(2, stage="rows", times=times) as pool:
        assert list(pool.map(lambda x: x * 2, [1, 2, 3])) == [2, 4, 6]  # map goes through submit: timed
    stages = times.get()
    stages.work("assemble", 1_500)
    new, wall, _ = stages.unpublished()
    assert new[TIMED.index("rows")][0] == 3 and new[TIMED.index("assemble")] == (1, 1, 1) and wall == 0
    stages.work("assemble", 600)  # 2.1 us in all: the rounding of the running total, not of each part
    stages.wall(999)
    new, wall, threads = stages.unpublished()
    assert new[TIMED.index("assemble")] == (1, 1, 1) and new[TIMED.index("rows")] == (0, 0, 0) and wall == 0
    assert threads[TIMED.index("assemble")] == 1
    assert STAGES == ("fetch", "rows", "index", "decode", "assemble")
