"""Benchmark figures from a probe trace (pure: lists and numpy in, a flat dict of numbers out).

Definitions (the same for every loader, robostream's and lerobot's):
- The first `warmup_batches` batches are start-up; throughput is measured from the arrival of the last warm-up batch
  to the arrival of the last batch. `first_batch_latency_s` is from the start of the dataset's construction to the
  first batch, `built_s` the construction's part of it (the dataset, sampler and loader built; metadata
  read, remote sources opened), so the first batch after construction is their difference.
- run_samples_per_s: every sample delivered (warm-up included) per second from dataset construction to the last
  batch. The timed figures cannot see work a change moves into or out of the warm-up (decoding less before the
  first batch shows as a slower timed window while the whole run takes as long): compare this one too.
- frames_per_s: camera frames delivered per second (samples x frames per sample); per node, the sum over the
  node's ranks (see `aggregate`).
- sample latency: the time a worker spent producing one sample (read, decode, assemble), p50/p95/p99 in ms.
- data_wait_frac: the share of the timed wall clock the consumer spent blocked waiting for the next batch.
- shuffle_randomness_frac: distinct episodes per batch / batch size, averaged over all batches; compare it with
  `uniform_randomness_frac`, the same figure for batches drawn uniformly at random from the same samples.
- samples_per_source (a mixture): samples delivered from each source over the whole run (warm-up included).
- stages (robostream's loaders): per stage of the read path (datasets/stages.py) over the whole run, summed over
  workers: tasks, busy_s (the tasks' time; fetch's: its requests' time, summed), wait_s (the workers' loops' time
  until the stage's result was there; fetch's: the reading threads' wait for bytes, summed over threads that wait at
  once), threads (the most a worker ran it on; fetch's: the read-ahead's requests allowed at once) and occupancy =
  busy_s / (worker_wall_s x threads), worker_wall_s being the loops' own time producing batches.
- client_cpu_s: CPU seconds (user + system) of the loader's process tree over the timed window (the probe process,
  its memory sampler left out, as client_main_cpu_s, and its DataLoader workers, exited ones included, as
  client_workers_cpu_s; the benchmark's own store is another process and never counts);
  client_cpu_s_per_1000_samples divides it by the window's samples, as samples_per_s does.
- remote reads (runs whose workers made storage requests), whole-run counters over the samples the workers produced
  (delivered and prefetched, warm-up included: counts' frames_delivered / frames per sample; the map-style loader
  does not count them: the samples the whole run delivered): requests_per_sample,
  bytes_per_sample, requests_per_mb, bytes_per_delivered_frame (per camera frame) and read_wait_s_per_1000_samples
  (the readers' wait for bytes, summed over threads).
- store_cpu_s (set by the command, runs through the benchmark's own store): the store's CPU seconds over the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from robostream.bench.probe import CACHE_FIELDS
from robostream.datasets.stages import STAGES, TIMED

PERCENTILES = (50, 95, 99)
CDF_POINTS = 101  # latency quantiles kept in a result for the CDF plot


def uniform_randomness(episode_lengths: Sequence[int], batch_size: int, batches: int = 200, seed: int = 0) -> float:
    """Mean distinct episodes per batch / batch size for batches drawn uniformly without replacement."""
    episode_of_sample = np.repeat(np.arange(len(episode_lengths)), np.asarray(episode_lengths, dtype=np.int64))
    size = min(batch_size, len(episode_of_sample))
    if size == 0:
        return 0.0
    rng = np.random.default_rng(seed)
    distinct = [len(np.unique(rng.choice(episode_of_sample, size=size, replace=False))) for _ in range(batches)]
    return float(np.mean(distinct) / size)


def randomness(batch_episodes: Sequence[Sequence[Any]]) -> float:
    """Mean distinct episodes per batch / batch size."""
    fractions = [len(set(b)) / len(b) for b in batch_episodes if len(b)]
    return float(np.mean(fractions)) if fractions else 0.0


def cache_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """Decoder-cache counters summed over workers (each worker's last report), hit rate recomputed."""
    last: dict[str, list[float]] = {}
    for record in records:
        last.update(record.get("worker_stats") or {})
    if not last:
        return None
    totals = {name: float(sum(v[i] for v in last.values() if i < len(v))) for i, name in enumerate(CACHE_FIELDS)}
    lookups = totals["hits"] + totals["misses"]
    return {**totals, "hit_rate": totals["hits"] / lookups if lookups else 0.0}


def stage_figures(counts: Mapping[str, int]) -> dict[str, dict[str, float | None]]:
    """Per stage that ran: tasks, busy_s, wait_s, threads and occupancy, from the loader's counters
    (datasets/counters.py) and the workers' wall time."""
    stages: dict[str, dict[str, float | None]] = {}
    for stage in STAGES:
        if stage in TIMED:
            figures: dict[str, float | None] = {
                "tasks": counts.get(f"{stage}_tasks", 0),
                "busy_s": counts.get(f"{stage}_busy_us", 0) / 1e6,
                "wait_s": counts.get(f"{stage}_wait_us", 0) / 1e6,
                "threads": counts.get(f"{stage}_threads", 0),
            }
        else:  # fetch: the storage's requests, their time and the readers' wait for bytes, as counted there
            figures = {
                "tasks": counts.get("fetch_tasks", 0),
                "busy_s": counts.get("fetch_busy_us", 0) / 1e6,
                "wait_s": counts.get("read_wait_us", 0) / 1e6,
                "threads": counts.get("fetch_threads", 0),
            }
        if figures["tasks"]:
            stages[stage] = figures
    return with_occupancy(stages, counts.get("worker_wall_us", 0) / 1e6)


def with_occupancy(
    stages: Mapping[str, Mapping[str, float | None]], worker_wall_s: float
) -> dict[str, dict[str, float | None]]:
    """The stages with occupancy = busy_s / (worker_wall_s x threads) (None where either is unknown or zero)."""
    out = {}
    for stage, figures in stages.items():
        busy, threads = figures["busy_s"], figures["threads"]
        capacity = worker_wall_s * threads if threads else 0.0
        out[stage] = {**figures, "occupancy": busy / capacity if busy is not None and capacity else None}
    return out


def merge_stages(per_rank: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[str, float | None]], float]:
    """The ranks' stages as one job's: tasks, busy and wait summed, the most threads, occupancy over the summed
    wall time; and that wall time."""
    wall = float(sum(r["worker_wall_s"] for r in per_rank))
    merged: dict[str, dict[str, float | None]] = {}
    for rank in per_rank:
        for stage, figures in rank["stages"].items():
            into = merged.setdefault(stage, {"tasks": 0, "busy_s": None, "wait_s": 0.0, "threads": None})
            for key in ("tasks", "wait_s", "busy_s"):
                if figures[key] is not None:
                    into[key] = (into[key] or 0) + figures[key]
            if figures["threads"] is not None:
                into["threads"] = max(into["threads"] or 0, figures["threads"])
    return with_occupancy(merged, wall), wall


def client_cpu_figures(main_s: float, workers_s: float, samples: float) -> dict[str, float]:
    """The loader's process tree's CPU over the timed window: its parts, total and per 1,000 of its samples."""
    total = main_s + workers_s
    return {
        "client_cpu_s": total,
        "client_main_cpu_s": main_s,
        "client_workers_cpu_s": workers_s,
        "client_cpu_s_per_1000_samples": 1e3 * total / samples,
    }


def remote_read_figures(counts: Mapping[str, int], frames_per_sample: int, delivered: int) -> dict[str, float]:
    """Requests, bytes and the readers' wait per sample produced (see the module docstring; `delivered`: the samples
    the run delivered, for a loader that does not count its frames); none for a run that made no storage request
    (local data)."""
    requests, read = counts.get("fetch_tasks", 0), counts.get("bytes_read", 0)
    frames = counts.get("frames_delivered") or delivered * frames_per_sample
    if not requests or not frames:
        return {}
    produced = frames / frames_per_sample
    return {
        "requests_per_sample": requests / produced,
        "bytes_per_sample": read / produced,
        "requests_per_mb": requests / (read / 1e6) if read else 0.0,
        "bytes_per_delivered_frame": read / frames,
        "read_wait_s_per_1000_samples": counts.get("read_wait_us", 0) / 1e3 / produced,
    }


def summarize(trace: Mapping[str, Any], warmup_batches: int) -> dict[str, Any]:
    """Per-rank figures of one run (see the module docstring for definitions)."""
    records = trace["records"]
    if len(records) <= warmup_batches:
        raise ValueError(
            f"the run delivered {len(records)} batches, not more than warmup_batches={warmup_batches}: "
            "nothing was timed; use fewer warm-up batches, more data or a smaller batch size"
        )
    timed = records[warmup_batches:]
    start = records[warmup_batches - 1]["arrival_s"] if warmup_batches else 0.0
    elapsed = timed[-1]["arrival_s"] - start
    samples = sum(len(r["episodes"]) for r in timed)
    run_samples = sum(len(r["episodes"]) for r in records)  # warm-up included
    frames = samples * trace["frames_per_sample"]
    latencies_ms = np.array([s for r in timed for s in r["sample_s"]], dtype=np.float64) * 1e3
    out: dict[str, Any] = {
        "batches": len(timed),
        "samples": samples,
        "frames_delivered": frames,
        "wallclock_s": elapsed,
        "total_wallclock_s": records[-1]["arrival_s"],
        "samples_per_s": samples / elapsed,
        "run_samples_per_s": run_samples / records[-1]["arrival_s"],
        "frames_per_s": frames / elapsed,
        "first_batch_latency_s": records[0]["arrival_s"],
        "data_wait_frac": sum(r["wait_s"] for r in timed) / elapsed,
        # a mixture's episodes are (source, episode) pairs: sources number their episodes alike
        "shuffle_randomness_frac": randomness(
            [list(zip(r["sources"], r["episodes"])) if "sources" in r else r["episodes"] for r in records]
        ),
        "peak_rss_mib": trace["peak_rss_bytes"] / 2**20,
        "baseline_rss_mib": trace["baseline_rss_bytes"] / 2**20,
        "peak_pss_mib": trace.get("peak_pss_bytes", 0) / 2**20,
        "peak_worker_pss_mib": trace.get("peak_worker_pss_bytes", 0) / 2**20,
        "latency_cdf_ms": np.percentile(latencies_ms, np.linspace(0, 100, CDF_POINTS)).tolist(),
    }
    for p in PERCENTILES:
        out[f"p{p}_sample_latency_ms"] = float(np.percentile(latencies_ms, p))
    if "built_s" in trace:  # traces before it was measured have none
        out["built_s"] = trace["built_s"]
    if any("sources" in r for r in records):  # a mixture: samples per source over the whole run
        per_source = np.bincount(np.concatenate([np.asarray(r.get("sources", []), dtype=np.int64) for r in records]))
        out["samples_per_source"] = per_source.tolist()
    counts = trace.get("counts") or {}
    if counts.get("frames_delivered"):
        out["decoded_per_delivered"] = counts["frames_decoded"] / counts["frames_delivered"]
        out["decoded_frames_per_s"] = out["frames_per_s"] * out["decoded_per_delivered"]
    if counts.get("frames_decoded_gpu") or counts.get("frames_decoded_cpu_fallback"):
        # cameras asked on a GPU: where their frames were decoded (the whole run's)
        out["frames_decoded_gpu"] = counts["frames_decoded_gpu"]
        out["frames_decoded_cpu_fallback"] = counts["frames_decoded_cpu_fallback"]
    # The whole run's frames (warm-up included, as a store's bytes served are): decoded when counted, else delivered.
    out["run_frames"] = counts.get("frames_decoded") or run_samples * trace["frames_per_sample"]
    # remote bytes and the readers' wait for them, read-ahead requests in flight, blocks fetched ahead and evicted
    # unread, requests retried (throttles among them); reused vs new batch buffers
    for key in (
        "bytes_read",
        "read_wait_us",
        "in_flight_peak",
        "evicted_unread",
        "reader_fetches",
        "retries",
        "throttled",
        "pooled_batches",
        "fresh_batches",
    ):
        if key in counts:
            out[key] = counts[key]
    out.update(remote_read_figures(counts, trace["frames_per_sample"], run_samples))
    cpu = trace.get("client_cpu_s")
    if cpu:
        out.update(client_cpu_figures(cpu["main"], cpu["children"], samples))
    if counts.get("worker_wall_us"):
        out["worker_wall_s"] = counts["worker_wall_us"] / 1e6
        out["stages"] = stage_figures(counts)
    cache = cache_totals(records)
    if cache is not None:
        out["video_decoder_cache"] = cache
        # Whole-run counts over whole-run frames (the cache counters include the warm-up batches too).
        delivered = run_samples * trace["frames_per_sample"]
        if delivered and cache.get("decoder_calls"):
            out["decoder_calls_per_100_frames"] = 100 * cache["decoder_calls"] / delivered
            out["seeks_per_100_frames"] = 100 * cache["seeks"] / delivered
    split = trace.get("split")
    if split:
        out["single_process_samples_per_s"] = split["samples_per_s"]
        per_sample = 1e3 / max(1, split["samples"])
        out["fetch_ms_per_sample"] = split["fetch_s"] * per_sample
        out["decode_ms_per_sample"] = split["decode_s"] * per_sample
    return out


def weighted_percentiles(
    values: np.ndarray, weights: np.ndarray, percentiles: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Percentiles of `values` where each value stands for `weight` observations."""
    order = np.argsort(values, kind="stable")
    sorted_values, cumulative = np.asarray(values)[order], np.cumsum(np.asarray(weights, dtype=np.float64)[order])
    positions = (cumulative - 0.5 * np.asarray(weights, dtype=np.float64)[order]) / cumulative[-1] * 100
    return np.interp(np.asarray(percentiles, dtype=np.float64), positions, sorted_values)


def aggregate(per_rank: Sequence[Mapping[str, Any]], nodes: int) -> dict[str, Any]:
    """Job-wide figures from every rank's summary: throughput summed (and per node), latency and memory worst-case.

    Latency percentiles of the job are taken from the ranks' pooled CDFs (each rank's quantiles weigh by its
    samples), so a slow rank shows in p99.
    """
    if not per_rank:
        raise ValueError("no rank reported a result")
    total = {
        key: float(sum(r[key] for r in per_rank))
        for key in ("samples_per_s", "run_samples_per_s", "frames_per_s", "samples", "frames_delivered")
    }
    out: dict[str, Any] = dict(per_rank[0])
    out.update(total)
    out.update(
        {
            "ranks": len(per_rank),
            "nodes": nodes,
            "frames_per_s_node": total["frames_per_s"] / nodes,
            "samples_per_s_node": total["samples_per_s"] / nodes,
            "first_batch_latency_s": max(r["first_batch_latency_s"] for r in per_rank),
            "wallclock_s": max(r["wallclock_s"] for r in per_rank),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in per_rank),
            "peak_rss_mib_node_sum": sum(r["peak_rss_mib"] for r in per_rank) / nodes,
            "peak_pss_mib": max(r["peak_pss_mib"] for r in per_rank),
            "peak_worker_pss_mib": max(r["peak_worker_pss_mib"] for r in per_rank),
            "data_wait_frac": float(np.mean([r["data_wait_frac"] for r in per_rank])),
            "shuffle_randomness_frac": float(np.mean([r["shuffle_randomness_frac"] for r in per_rank])),
        }
    )
    values = np.concatenate([r["latency_cdf_ms"] for r in per_rank])
    weights = np.concatenate([np.full(len(r["latency_cdf_ms"]), max(1, r["samples"])) for r in per_rank])
    out["latency_cdf_ms"] = weighted_percentiles(values, weights, np.linspace(0, 100, CDF_POINTS)).tolist()
    for p in PERCENTILES:
        out[f"p{p}_sample_latency_ms"] = float(weighted_percentiles(values, weights, [p])[0])
    for key in ("decoded_frames_per_s", "bytes_read"):
        if all(key in r for r in per_rank):
            out[key] = float(sum(r[key] for r in per_rank))
    if all("built_s" in r for r in per_rank):
        out["built_s"] = max(r["built_s"] for r in per_rank)
    if all("client_cpu_s" in r for r in per_rank):
        out.update(
            client_cpu_figures(
                sum(r["client_main_cpu_s"] for r in per_rank),
                sum(r["client_workers_cpu_s"] for r in per_rank),
                total["samples"],
            )
        )
    if all("stages" in r for r in per_rank):
        out["stages"], out["worker_wall_s"] = merge_stages(per_rank)
    if all("samples_per_source" in r for r in per_rank):
        width = max(len(r["samples_per_source"]) for r in per_rank)
        out["samples_per_source"] = (
            np.sum(
                [np.pad(r["samples_per_source"], (0, width - len(r["samples_per_source"]))) for r in per_rank], axis=0
            )
            .astype(int)
            .tolist()
        )
    return out
