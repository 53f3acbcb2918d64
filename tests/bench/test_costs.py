"""What a run costs the client and the store: the probe's CPU clock of its process tree (workers that already exited
included), the cores the store and the loader are pinned to, and a real run through the 50 ms slow store beside its
local twin (--with_local)."""

import json
import multiprocessing
import os
import threading
import time

import pytest

from robostream.bench.cores import MIN_CORES_TO_PIN, pinned_here, split_cores
from robostream.bench.probe import pin_process, tree_cpu_s
from robostream.cli import main


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_cpu_clock_counts_children_that_already_exited():
    """A worker that ran and exited (DataLoader workers at the end of a pass) still counts, through getrusage."""
    before = tree_cpu_s()
    child = multiprocessing.get_context("fork").Process(target=_burn, args=(0.3,))
    child.start()
    child.join()
    after = tree_cpu_s()
    assert after["children"] - before["children"] >= 0.2
    assert after["main"] - before["main"] < 0.2  # the child's CPU is not this process's


def _affinity_of_a_new_thread() -> set[int]:
    seen: list[set[int]] = []
    thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    thread.start()
    thread.join()
    return seen[0]


def test_pinning_moves_every_thread_and_what_they_start_and_comes_back():
    cores = sorted(os.sched_getaffinity(0))
    waiting = threading.Event()
    started_before = threading.Thread(target=waiting.wait)
    started_before.start()
    try:
        with pinned_here(cores[:1]):
            assert _affinity_of_a_new_thread() == {cores[0]}
            assert os.sched_getaffinity(started_before.native_id) == {cores[0]}  # threads already running too
        assert os.sched_getaffinity(started_before.native_id) == set(cores)
    finally:
        waiting.set()
        started_before.join()
        pin_process(cores)
    assert os.sched_getaffinity(0) == set(cores)


def test_the_store_gets_its_own_core_only_where_there_are_cores_to_spare():
    spare = split_cores(available=range(8), ranks_per_node=1)
    assert spare.store == [7] and spare.probe == [0, 1, 2, 3, 4, 5, 6]
    assert spare.info(with_store=False) == {"store_cores": None, "probe_cores": spare.probe, "why": spare.why}
    two = split_cores(available=[0, 1], ranks_per_node=1)
    assert two.store is None and two.probe is None and "2 cores" in two.why
    assert split_cores(available=range(MIN_CORES_TO_PIN), ranks_per_node=1).store == [MIN_CORES_TO_PIN - 1]
    shared = split_cores(available=range(16), ranks_per_node=4)
    assert shared.store is None and "4 ranks" in shared.why
    # asked for: a core each on a 2-core machine (not with one core), or never
    own = split_cores(available=[0, 1], ranks_per_node=1, store_cores="own")
    assert own.store == [1] and own.probe == [0]
    alone = split_cores(available=[3], ranks_per_node=1, store_cores="own")
    assert alone.store is None and "1 cores, fewer than 2" in alone.why
    never = split_cores(available=range(8), ranks_per_node=1, store_cores="shared")
    assert never.store is None and never.probe is None and "shared" in never.why


@pytest.fixture(scope="module")
def remote_and_local(av1_root, tmp_path_factory):
    """One invocation: both loaders with 2 workers over the local dataset, each then through the 50 ms store; more
    batches asked for than a pass holds, so the workers exit before the run's end. (remote, local) per loader."""
    out = tmp_path_factory.mktemp("costs")
    args = ["bench", str(av1_root), "--mode", "single", "--loader", "stream", "map", "--batch_size", "8"]
    args += ["--num_workers", "2", "--num_batches", "1000", "--split_samples", "0", "--store_latency_ms", "50"]
    args += ["--map_sampler", "plain"]  # the map runs' batches as DataLoader(shuffle=True) makes them
    assert main([*args, "--with_local", "--out", str(out)]) == 0
    return {
        loader: tuple(json.loads((out / f"{where}_{loader}_single_b8_w2_cpu.json").read_text()) for where in WHERE)
        for loader in ("stream", "map")
    }


WHERE = ("slow50ms", "local")


@pytest.mark.parametrize("loader", ["stream", "map"])
def test_client_cpu_is_the_loaders_process_tree_workers_included(remote_and_local, loader):
    for result in remote_and_local[loader]:
        m = result["metrics"]
        assert m["client_cpu_s"] > 0 and m["client_cpu_s"] >= m["client_main_cpu_s"]
        assert m["client_workers_cpu_s"] > 0  # workers joined at the end of the pass: counted after they exited
        assert m["client_cpu_s_per_1000_samples"] == pytest.approx(1e3 * m["client_cpu_s"] / m["samples"])
        assert result["info"]["cpu_affinity"]
        assert set(result["info"]["pinning"]) == {"store_cores", "probe_cores", "why"}
        assert result["info"].get("map_sampler") == (None if loader == "stream" else "plain")


@pytest.mark.parametrize("loader", ["stream", "map"])
def test_remote_reads_per_sample_agree_with_the_store_and_local_runs_have_none(remote_and_local, loader):
    remote, local = remote_and_local[loader]
    m, store = remote["metrics"], remote["metrics"]["store"]
    assert m["requests_per_sample"] > 0 and m["bytes_per_sample"] > 0 and m["bytes_per_delivered_frame"] > 0
    assert m["requests_per_mb"] > 0 and m["read_wait_s_per_1000_samples"] >= 0
    # Per sample produced: the readers' requests and bytes over the same samples; the store served those and more
    # (the run's metadata reads).
    produced, requests = m["bytes_read"] / m["bytes_per_sample"], m["stages"]["fetch"]["tasks"]
    assert m["requests_per_sample"] == pytest.approx(requests / produced)
    assert 0 < requests <= store["requests"] and m["bytes_read"] <= store["bytes"]
    assert m["store_cpu_s"] > 0
    for key in ("requests_per_sample", "bytes_per_sample", "store_cpu_s", "store"):
        assert key not in local["metrics"]
    assert local["config"]["store"] is None and local["info"]["pinning"]["store_cores"] is None
    assert remote["info"]["pinning"]["probe_cores"] == local["info"]["pinning"]["probe_cores"]  # equal cores


def test_the_report_prints_the_costs_and_the_remote_local_ratios(remote_and_local):
    from robostream.bench.report import markdown

    text = markdown([*remote_and_local["stream"], *remote_and_local["map"]], None)
    assert "Costs, slow50ms robostream stream / single: client CPU " in text
    assert "requests per MB" in text and "store CPU " in text and "vs local: samples/s " in text
    assert "Costs, local robostream stream / single: client CPU " in text
    assert "Costs, slow50ms robostream map / single: client CPU " in text
    assert text.count("vs local: samples/s ") == 2 and text.count("KB per delivered camera frame") == 2


def test_with_local_needs_the_store(av1_root, tmp_path, capsys):
    assert main(["bench", str(av1_root), "--with_local", "--out", str(tmp_path)]) == 2
    assert "--with_local" in capsys.readouterr().err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 cores to split")
def test_with_cores_to_spare_the_store_and_the_loader_run_on_their_own(av1_root, tmp_path, monkeypatch):
    """The pinned path end to end, on this machine's cores as if they were enough: the probe (and its workers) on
    the loader's cores, the store's on its own, and this process's cores as they were afterwards."""
    import robostream.bench.cores

    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(robostream.bench.cores, "MIN_CORES_TO_PIN", len(cores))
    args = ["bench", str(av1_root), "--mode", "single", "--loader", "stream", "--batch_size", "4", "--num_workers"]
    args += ["1", "--num_batches", "3", "--split_samples", "0", "--store_latency_ms", "5", "--out", str(tmp_path)]
    assert main(args) == 0
    info = json.loads((tmp_path / "slow5ms_stream_single_b4_w1_cpu.json").read_text())["info"]
    assert info["pinning"]["store_cores"] == cores[-1:] and info["pinning"]["probe_cores"] == cores[:-1]
    assert info["cpu_affinity"] == cores[:-1]  # what the probe process itself ran on
    assert os.sched_getaffinity(0) == set(cores)
