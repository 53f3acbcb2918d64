"""Benchmark figures from hand-made traces: every definition pinned to numbers worked out by hand."""

import numpy as np
import pytest

from robostream.bench.metrics import (
    aggregate,
    cache_totals,
    randomness,
    summarize,
    uniform_randomness,
    weighted_percentiles,
)


def _trace(arrivals, waits=None, episodes=None, sample_s=None, frames_per_sample=3, built_s=None):
    n = len(arrivals)
    episodes = episodes or [[0, 1, 2, 3]] * n
    return {
        "records": [
            {
                "arrival_s": a,
                "wait_s": (waits or [0.0] * n)[i],
                "episodes": episodes[i],
                "sample_s": (sample_s or [[0.01] * len(episodes[i])] * n)[i],
            }
            for i, a in enumerate(arrivals)
        ],
        "frames_per_sample": frames_per_sample,
        "built_s": arrivals[0] / 3 if built_s is None else built_s,
        "peak_rss_bytes": 3 * 2**20,
        "baseline_rss_bytes": 2**20,
        "peak_pss_bytes": 2 * 2**20,
        "peak_worker_pss_bytes": 2**19,
    }


def test_throughput_is_timed_after_the_warmup_and_first_batch_is_latency():
    trace = _trace([1.5, 2.0, 2.5, 3.0, 4.0], waits=[1.5, 0.5, 0.25, 0.25, 0.5])
    m = summarize(trace, warmup_batches=2)
    assert m["first_batch_latency_s"] == 1.5 and m["built_s"] == 0.5
    assert "built_s" not in summarize({k: v for k, v in trace.items() if k != "built_s"}, warmup_batches=2)  # older
    assert m["batches"] == 3 and m["samples"] == 12 and m["wallclock_s"] == 2.0  # from 2.0 (2nd arrival) to 4.0
    assert m["samples_per_s"] == 6.0 and m["frames_per_s"] == 18.0
    # the whole run, start-up and warm-up included: 20 samples from construction to the last arrival
    assert m["run_samples_per_s"] == pytest.approx(20 / 4.0)
    assert m["data_wait_frac"] == pytest.approx(1.0 / 2.0)
    assert m["peak_rss_mib"] == 3.0 and m["baseline_rss_mib"] == 1.0 and m["peak_pss_mib"] == 2.0
    assert m["peak_worker_pss_mib"] == 0.5


def test_latency_percentiles_and_cdf_come_from_timed_samples_only():
    sample_s = [[5.0] * 4] + [[i / 1000 for i in range(1, 5)]] * 2
    m = summarize(_trace([1.0, 2.0, 3.0], sample_s=sample_s), warmup_batches=1)
    assert m["p50_sample_latency_ms"] == pytest.approx(2.5)
    assert m["p99_sample_latency_ms"] == pytest.approx(np.percentile([1, 2, 3, 4] * 2, 99))
    assert m["latency_cdf_ms"][0] == pytest.approx(1.0) and m["latency_cdf_ms"][-1] == pytest.approx(4.0)


def test_nothing_timed_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="warmup_batches=2"):
        summarize(_trace([1.0, 2.0]), warmup_batches=2)


def test_decoded_per_delivered_cache_and_split():
    trace = _trace([1.0, 2.0])
    trace["counts"] = {"frames_decoded": 30, "frames_delivered": 120, "bytes_read": 0}
    # hits, misses, evictions, size, decoder calls, seeks
    trace["records"][0]["worker_stats"] = {"0": [1, 2, 0, 2, 4, 3], "1": [0, 3, 1, 2, 2, 2]}
    trace["records"][1]["worker_stats"] = {"0": [5, 2, 0, 2, 6, 4]}  # later report of worker 0 replaces its first
    trace["split"] = {"samples": 10, "seconds": 1.0, "decode_s": 0.6, "fetch_s": 0.4, "samples_per_s": 10.0}
    m = summarize(trace, warmup_batches=1)
    assert m["decoded_per_delivered"] == 0.25 and m["decoded_frames_per_s"] == pytest.approx(m["frames_per_s"] / 4)
    assert m["video_decoder_cache"] == {
        "hits": 5,
        "misses": 5,
        "evictions": 1,
        "size": 4,
        "decoder_calls": 8,
        "seeks": 6,
        "hit_rate": 0.5,
    }
    # per 100 frames delivered over the whole run (2 batches x 4 samples x 3 frames)
    assert m["decoder_calls_per_100_frames"] == pytest.approx(800 / 24)
    assert m["seeks_per_100_frames"] == pytest.approx(600 / 24)
    assert m["fetch_ms_per_sample"] == pytest.approx(40.0) and m["decode_ms_per_sample"] == pytest.approx(60.0)
    assert m["bytes_read"] == 0
    assert cache_totals([{"episodes": []}]) is None


def test_randomness_against_a_uniform_sampler():
    assert randomness([[1, 1, 2, 3], [4, 4, 4, 4]]) == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert uniform_randomness([1000] * 1000, 32) > 0.95  # many episodes: nearly all distinct
    assert uniform_randomness([100], 32) == pytest.approx(1 / 32)  # one episode
    # 20 equal episodes, 32 draws without replacement: about 20 x (1 - (19/20)^32) / 32 distinct
    assert uniform_randomness([200] * 20, 32, batches=500) == pytest.approx(20 * (1 - (19 / 20) ** 32) / 32, abs=0.02)


def test_aggregate_sums_throughput_per_node_and_pools_latency():
    ranks = [
        summarize(_trace([1.0, 2.0, 3.0], sample_s=[[s / 1000] * 4] * 3, built_s=c), 1)
        for s, c in ((1.0, 0.25), (9.0, 0.5))
    ]
    job = aggregate(ranks, nodes=2)
    assert job["samples_per_s"] == pytest.approx(8.0) and job["frames_per_s_node"] == pytest.approx(12.0)
    assert job["run_samples_per_s"] == pytest.approx(2 * 12 / 3.0)  # each rank: 12 samples by its last batch at 3 s
    assert job["ranks"] == 2 and job["first_batch_latency_s"] == 1.0 and job["built_s"] == 0.5
    assert 1.0 <= job["p50_sample_latency_ms"] <= 9.0 and job["p99_sample_latency_ms"] == pytest.approx(9.0)
    with pytest.raises(ValueError, match="no rank"):
        aggregate([], 1)


def test_weighted_percentiles_weigh_values():
    values = np.array([1.0, 10.0])
    assert weighted_percentiles(values, np.array([99, 1]), [50])[0] == pytest.approx(1.0, abs=0.1)
    assert weighted_percentiles(values, np.array([1, 99]), [50])[0] == pytest.approx(10.0, abs=0.1)


def _staged_trace(wall_us, decode_busy_us, decode_threads):
    trace = _trace([1.0, 2.0])
    trace["counts"] = {
        "worker_wall_us": wall_us,
        "rows_tasks": 4,
        "rows_busy_us": 400_000,
        "rows_wait_us": 100_000,
        "rows_threads": 16,
        "decode_tasks": 10,
        "decode_busy_us": decode_busy_us,
        "decode_wait_us": 1_500_000,
        "decode_threads": decode_threads,
        "assemble_tasks": 2,
        "assemble_busy_us": 200_000,
        "assemble_wait_us": 200_000,
        "assemble_threads": 1,
        "fetch_tasks": 7,
        "fetch_busy_us": 700_000,
        "fetch_threads": 64,
        "read_wait_us": 300_000,
    }
    return trace


def test_stages_busy_wait_and_occupancy_over_the_workers_wall_time():
    m = summarize(_staged_trace(2_000_000, 2_000_000, 2), warmup_batches=1)
    stages = m["stages"]
    assert list(stages) == ["fetch", "rows", "decode", "assemble"]  # in pipeline order; index never ran
    assert m["worker_wall_s"] == pytest.approx(2.0)
    assert stages["decode"] == pytest.approx(
        {"tasks": 10, "busy_s": 2.0, "wait_s": 1.5, "threads": 2, "occupancy": 0.5}  # 2 s of 2 threads x 2 s
    )
    assert stages["rows"]["occupancy"] == pytest.approx(0.4 / (2.0 * 16))
    assert stages["assemble"]["occupancy"] == pytest.approx(0.1)
    # fetch: the storage's requests, their time, the read-ahead's threads and the readers' wait for bytes
    assert stages["fetch"] == pytest.approx(
        {"tasks": 7, "busy_s": 0.7, "wait_s": 0.3, "threads": 64, "occupancy": 0.7 / (2.0 * 64)}
    )
    assert "stages" not in summarize(_trace([1.0, 2.0]), warmup_batches=1)  # a peer's loader counts nothing


def test_aggregate_merges_the_ranks_stages():
    ranks = [summarize(_staged_trace(2_000_000, busy, threads), 1) for busy, threads in ((2_000_000, 2), (0, 4))]
    job = aggregate(ranks, nodes=1)
    assert job["worker_wall_s"] == pytest.approx(4.0)
    decode = job["stages"]["decode"]
    assert decode["tasks"] == 20 and decode["busy_s"] == pytest.approx(2.0) and decode["threads"] == 4
    assert decode["occupancy"] == pytest.approx(2.0 / (4.0 * 4))
    fetch = job["stages"]["fetch"]
    assert fetch["busy_s"] == pytest.approx(1.4) and fetch["wait_s"] == pytest.approx(0.6) and fetch["threads"] == 64


def test_client_cpu_per_1000_timed_samples_and_remote_reads_per_sample_produced():
    trace = _trace([1.0, 2.0, 3.0])  # 2 timed batches of 4 samples, 3 frames each
    trace["client_cpu_s"] = {"main": 0.5, "children": 1.5}
    # 40 samples produced (120 frames: the 12 delivered and those prefetched), 20 requests of 2 MB in all
    trace["counts"] = {
        "frames_decoded": 120,
        "frames_delivered": 120,
        "fetch_tasks": 20,
        "bytes_read": 2_000_000,
        "read_wait_us": 400_000,
    }
    m = summarize(trace, warmup_batches=1)
    assert m["client_cpu_s"] == 2.0 and m["client_main_cpu_s"] == 0.5 and m["client_workers_cpu_s"] == 1.5
    assert m["client_cpu_s_per_1000_samples"] == pytest.approx(2.0 / 8 * 1000)
    assert m["requests_per_sample"] == pytest.approx(0.5) and m["bytes_per_sample"] == pytest.approx(50_000)
    assert m["requests_per_mb"] == pytest.approx(10.0) and m["bytes_per_delivered_frame"] == pytest.approx(2e6 / 120)
    assert m["read_wait_s_per_1000_samples"] == pytest.approx(0.4 / 40 * 1000)
    local = _trace([1.0, 2.0])
    local["counts"] = {
        "frames_decoded": 24,
        "frames_delivered": 24,
        "fetch_tasks": 0,
        "bytes_read": 0,
        "read_wait_us": 0,
    }
    assert "requests_per_sample" not in summarize(local, warmup_batches=1)  # no storage request: no such figures
    uncounted = {**trace, "counts": {"fetch_tasks": 6, "bytes_read": 600_000}}  # map-style: no frames counted
    assert summarize(uncounted, warmup_batches=1)["requests_per_sample"] == pytest.approx(6 / 12)  # 12 delivered
    ranks = [summarize(trace, 1), summarize(trace, 1)]
    job = aggregate(ranks, nodes=1)
    assert job["client_cpu_s"] == 4.0 and job["client_cpu_s_per_1000_samples"] == pytest.approx(4.0 / 16 * 1000)
