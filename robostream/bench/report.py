"""Benchmark results on disk and for people: one JSON per run, a CSV of all runs, a markdown table and PNG plots.

Result files in an output folder: `<name>.json` (job-wide; `<name>_rank<r>.json` for each rank of a multi-rank job),
`reference_decode.json` (raw decode throughput), `results.csv`, and from `render` `report.md`, `throughput.png`,
`latency_cdf.png`.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REFERENCE = "reference_decode.json"
# The summary table's columns: (title, (metric key, format)), or (title, None) for a column table_cells composes
# from several metrics.
COLUMNS: tuple[tuple[str, tuple[str, str] | None], ...] = (
    ("frames/s/node", ("frames_per_s_node", "{:.0f}")),
    ("samples/s", ("samples_per_s", "{:.1f}")),
    ("first batch s", ("first_batch_latency_s", "{:.2f}")),  # from the start of construction
    ("built s", ("built_s", "{:.2f}")),  # construction's part of it
    ("p50 ms", ("p50_sample_latency_ms", "{:.1f}")),
    ("p95 ms", ("p95_sample_latency_ms", "{:.1f}")),
    ("p99 ms", ("p99_sample_latency_ms", "{:.1f}")),
    ("peak RSS MiB", ("peak_rss_mib", "{:.0f}")),
    ("peak PSS MiB", ("peak_pss_mib", "{:.0f}")),
    ("worker PSS MiB", ("peak_worker_pss_mib", "{:.0f}")),  # the largest worker's peak
    ("randomness (uniform)", None),
    ("decoded/delivered", ("decoded_per_delivered", "{:.3f}")),
    ("data wait", ("data_wait_frac", "{:.2f}")),
    ("fetch/decode ms", None),
    ("cache hit rate", None),
    ("calls / seeks per 100 frames", None),
)


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write atomically: an interrupted run never leaves a truncated result that looks complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, path)


def load_results(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Job-wide run results (rank files skipped) and the decode reference, if any."""
    runs, reference = [], None
    for path in sorted(Path(folder).glob("*.json")):
        if path.name == REFERENCE:
            reference = json.loads(path.read_text())
        elif "_rank" not in path.stem:
            payload = json.loads(path.read_text())
            if "metrics" in payload and "config" in payload:
                runs.append(payload)
    return runs, reference


def flat_row(result: Mapping[str, Any]) -> dict[str, Any]:
    """One CSV row: config fields, then scalar metrics (nested dicts flattened as `outer.inner`, at any depth:
    `stages.decode.busy_s`)."""
    row: dict[str, Any] = {}
    for key, value in result["config"].items():
        row[key] = json.dumps(value) if isinstance(value, (dict, list)) else value
    row.update(flat_metrics(result["metrics"]))
    return row


def flat_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar metrics by dotted name (lists, such as the latency CDF, left out)."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            flat.update(flat_metrics(value, f"{prefix}{key}."))
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat


def write_csv(folder: Path, results: Iterable[Mapping[str, Any]]) -> Path:
    rows = [flat_row(r) for r in results]
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    path = Path(folder) / "results.csv"
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def label(result: Mapping[str, Any]) -> str:
    config = result["config"]
    loader = config["loader"]
    who = f"robostream {loader}" if loader in ("stream", "map") else loader  # else a peer (runner.PEERS)
    return f"{who} / {config['mode']}"


def table_cells(result: Mapping[str, Any], reference: Mapping[str, Any] | None) -> list[str]:
    m = result["metrics"]
    cells = []
    for title, metric in COLUMNS:
        if metric is not None:
            key, fmt = metric
            value = m.get(key, m.get("frames_per_s") if key == "frames_per_s_node" else None)
            cells.append("-" if value is None else fmt.format(value))
        elif title == "randomness (uniform)":
            cells.append(f"{m['shuffle_randomness_frac']:.2f} ({m['uniform_randomness_frac']:.2f})")
        elif title == "fetch/decode ms":
            cells.append(
                f"{m['fetch_ms_per_sample']:.1f} / {m['decode_ms_per_sample']:.1f}"
                if "fetch_ms_per_sample" in m
                else "-"
            )
        elif title == "calls / seeks per 100 frames":
            cells.append(
                f"{m['decoder_calls_per_100_frames']:.1f} / {m['seeks_per_100_frames']:.1f}"
                if "seeks_per_100_frames" in m
                else "-"
            )
        else:
            cache = m.get("video_decoder_cache")
            cells.append(
                f"{cache['hit_rate']:.3f} ({cache['misses']:.0f} misses, {cache['evictions']:.0f} evicted)"
                if cache
                else "-"
            )
    if reference:
        cells.append(f"{m['frames_per_s'] / reference['frames_per_s']:.2f}")
        laid = reference.get("laid_out_frames_per_s")
        cells.append(f"{m['frames_per_s'] / laid:.2f}" if laid else "-")
    return cells


def markdown(results: list[dict[str, Any]], reference: Mapping[str, Any] | None) -> str:
    """A markdown table of the runs, with each run's share of the raw-decode reference and of its laid-out twin when
    there is one."""
    headers = ["run", *[c[0] for c in COLUMNS]] + (["x raw decode", "x laid-out decode"] if reference else [])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for result in results:
        lines.append("| " + " | ".join([label(result), *table_cells(result, reference)]) + " |")
    mixtures = [r for r in results if "samples_per_source" in r["metrics"]]
    if mixtures:
        lines.append("")
        lines.extend(mixture_line(r) for r in mixtures)
    staged = [r for r in results if r["metrics"].get("stages")]
    for result in staged:
        lines.append("")
        lines.extend(stage_table(result))
    costed = [r for r in results if "client_cpu_s" in r["metrics"] or "requests_per_sample" in r["metrics"]]
    if costed:
        lines.append("")
        lines.extend(cost_line(r, local_twin(r, results)) for r in costed)
    decoded_on = [r for r in results if r.get("info", {}).get("camera_decoders")]
    if decoded_on:
        lines.append("")
        lines.extend(decoders_line(r) for r in decoded_on)
    served = [r for r in results if "store" in r["metrics"]]
    if served:
        lines.append("")
        lines.extend(store_line(r) for r in served)
    if reference:
        lines.append("")
        runs = " / ".join(f"{r:.0f}" for r in reference.get("runs_frames_per_s", []))
        lines.append(
            f"Raw decode reference ({reference['decoder']}, {reference['processes']} processes, "
            f"{reference['frames']} frames): {reference['frames_per_s']:.0f} frames/s"
            + (f" (mean of {runs}, before and after the runs)." if runs else ".")
            + quiet_note(reference)
        )
        laid = reference.get("laid_out_frames_per_s")
        if laid:
            lines.append(
                f"Laid out (the same decoding, each frame laid out as samples hold it, contiguous (C, H, W), straight "
                f"into a batch of {reference['laid_out_batch_frames']}: the bound of any loader of lerobot's "
                f"samples as uint8): {laid:.0f} frames/s, "
                f"{laid / reference['frames_per_s']:.2f}x the raw decode."
            )
    return "\n".join(lines) + "\n"


QUIET_SPREAD = 0.10  # the reference moving more than this between before and after: the machine was not quiet


def quiet_note(reference: Mapping[str, Any]) -> str:
    """Whether the machine was quiet around the runs, so a contended reference cannot flatter the "x raw decode"
    ratios: the reference's spread before/after, and the load average (1 min) before the first measurement (what
    else ran; the one after counts this benchmark's own runs)."""
    loads = reference.get("runs_load_1min")
    rates = reference.get("runs_frames_per_s") or []
    if len(rates) < 2 or not loads:
        return ""
    spread = (max(rates) - min(rates)) / max(rates)
    cores = reference.get("cores", 1)
    verdict = "NOT quiet: compare the ratios with care" if spread > QUIET_SPREAD or loads[0] > cores / 2 else "quiet"
    return f" Machine {verdict}: the reference moved {100 * spread:.0f}%, load {loads[0]:.2f} before on {cores} cores."


STAGE_HEADERS = ("stage", "tasks", "busy s", "ms/task", "wait s", "threads", "occupancy %")


def stage_table(result: Mapping[str, Any]) -> list[str]:
    """Where a run's time went, per stage of its read path (bench/metrics.py: stage_figures): a markdown table under
    a line naming the run and its workers' wall time; '-' where a figure is unknown (a result made before fetch's busy
    time was measured)."""

    def cell(value: float | None, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    metrics = result["metrics"]
    lines = [
        f"Stages, {label(result)} (the workers' loops: {metrics['worker_wall_s']:.2f} s; wait: the loops' time "
        "until a stage's result was there; fetch's: the reading threads' wait for bytes, summed):",
        "| " + " | ".join(STAGE_HEADERS) + " |",
        "|" + "---|" * len(STAGE_HEADERS),
    ]
    for stage, figures in metrics["stages"].items():
        busy, tasks, occupancy = figures["busy_s"], figures["tasks"], figures["occupancy"]
        cells = [
            stage,
            f"{tasks:.0f}",
            cell(busy, "{:.2f}"),
            cell(None if busy is None or not tasks else 1e3 * busy / tasks, "{:.2f}"),
            cell(figures["wait_s"], "{:.2f}"),
            cell(figures["threads"], "{:.0f}"),
            cell(None if occupancy is None else 100 * occupancy, "{:.1f}"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# What a remote run and its local twin may differ in: where the data is and how it is read.
WHERE = frozenset({"label", "root", "repo_id", "revision", "read_options", "store", "peer_root"})


def local_twin(result: Mapping[str, Any], results: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The local run among `results` that a run through the benchmark's store repeats (the same configuration but
    where the data is); None for a local run or one without a twin."""
    if not result["config"].get("store"):
        return None

    def same(config: Mapping[str, Any]) -> str:
        return json.dumps({k: v for k, v in config.items() if k not in WHERE}, sort_keys=True)

    wanted = same(result["config"])
    return next(
        (
            r
            for r in results
            if not r["config"].get("store")
            and "://" not in str(r["config"].get("root"))
            and r["config"].get("repo_id") is None
            and same(r["config"]) == wanted
        ),
        None,
    )


def cost_line(result: Mapping[str, Any], twin: Mapping[str, Any] | None) -> str:
    """What a run cost the client and the store (bench/metrics.py): client CPU per 1,000 samples and the workers'
    share of it, the whole run's samples/s (start-up included), the readers' wait, requests and bytes per sample,
    requests per MB, bytes per delivered camera frame, the store's CPU; with a local twin, samples/s (timed and
    whole run) and client CPU per 1,000 samples as ratios remote/local."""
    m = result["metrics"]
    parts = []
    if "client_cpu_s" in m:
        workers = m["client_workers_cpu_s"] / m["client_cpu_s"] if m["client_cpu_s"] else 0.0
        parts.append(
            f"client CPU {m['client_cpu_s_per_1000_samples']:.2f} s per 1,000 samples ({100 * workers:.0f}% workers)"
        )
    if "run_samples_per_s" in m:
        parts.append(f"whole run {m['run_samples_per_s']:.0f} samples/s (start-up included)")
    if "requests_per_sample" in m:
        parts.append(
            f"readers waited {m['read_wait_s_per_1000_samples']:.2f} s per 1,000 samples; "
            f"{m['requests_per_sample']:.3f} requests and {m['bytes_per_sample'] / 1e3:.1f} KB per sample, "
            f"{m['requests_per_mb']:.2f} requests per MB, {m['bytes_per_delivered_frame'] / 1e3:.1f} KB per "
            "delivered camera frame"
        )
    if "store_cpu_s" in m:
        parts.append(f"store CPU {m['store_cpu_s']:.2f} s")
    if twin is not None:
        t = twin["metrics"]
        ratios = [f"samples/s {m['samples_per_s'] / t['samples_per_s']:.2f}x"]
        if m.get("run_samples_per_s") and t.get("run_samples_per_s"):
            ratios.append(f"whole run {m['run_samples_per_s'] / t['run_samples_per_s']:.2f}x")
        if m.get("client_cpu_s_per_1000_samples") and t.get("client_cpu_s_per_1000_samples"):
            ratios.append(
                f"client CPU per sample {m['client_cpu_s_per_1000_samples'] / t['client_cpu_s_per_1000_samples']:.2f}x"
            )
        parts.append(f"vs local: {', '.join(ratios)}")
    return f"Costs, {result['config']['label']} {label(result)}: " + "; ".join(parts)


def mixture_line(result: Mapping[str, Any]) -> str:
    """A mixture run: its construction time (main process), peak PSS per source and samples per source (listed up
    to 12 sources, else their range)."""
    counts, info = result["metrics"]["samples_per_source"], result.get("info", {})
    shown = str(counts) if len(counts) <= 12 else f"{min(counts)}..{max(counts)} over {len(counts)} sources"
    line = f"Mixture, {label(result)}: samples per source {shown}"
    if "construction_s" in info:
        line += f"; construction {info['construction_s']:.2f} s"
    pss = result["metrics"].get("peak_pss_mib")
    if pss:
        line += f"; peak PSS {pss / len(counts):.2f} MiB per source"
    return line


def decoders_line(result: Mapping[str, Any]) -> str:
    """A run asked to decode on a GPU: which decoder served each camera, and where its frames were decoded."""
    where = "; ".join(f"{camera}: {decoder}" for camera, decoder in result["info"]["camera_decoders"].items())
    m = result["metrics"]
    line = f"Decoders, {label(result)}: {where}"
    if "frames_decoded_gpu" in m:
        line += (
            f"; frames decoded on the GPU {m['frames_decoded_gpu']:,}, on the CPU {m['frames_decoded_cpu_fallback']:,}"
        )
    return line


def store_line(result: Mapping[str, Any]) -> str:
    """What a run read from the slow store: its settings, requests, requests in flight, bytes served (and as a
    multiple of the video bytes of the frames the run decoded, at the dataset's mean bytes per frame), and the time
    the readers waited for bytes (streaming: summed over workers); its CPU is in the run's cost line."""
    settings, load = result["config"].get("store") or {}, result["metrics"]["store"]
    metrics = result["metrics"]
    knobs = ", ".join(
        f"{name} {value:g}" if isinstance(value, (int, float)) else f"{name} {value}"
        for name, value in settings.items()
        if value is not None
    )
    line = (
        f"Slow store ({knobs}), {label(result)}: {load['requests']} requests, in flight mean "
        f"{load['in_flight_mean']:.2f} / max {load['in_flight_max']}, {load['bytes'] / 1e6:.1f} MB served"
    )
    if load.get("frame_bytes") and metrics.get("run_frames"):
        line += f" = {load['bytes'] / (metrics['run_frames'] * load['frame_bytes']):.2f}x the frames' video bytes"
    if "read_wait_us" in metrics:
        line += (
            f"; readers waited {metrics['read_wait_us'] / 1e6:.1f} s for bytes and fetched "
            f"{metrics.get('reader_fetches', 0)} blocks themselves, {metrics.get('evicted_unread', 0)} blocks "
            f"fetched ahead were evicted unread; {metrics.get('retries', 0)} requests retried "
            f"({metrics.get('throttled', 0)} throttled: 429/503 SlowDown)"
        )
    return line


def plots(folder: Path, results: list[dict[str, Any]], reference: Mapping[str, Any] | None) -> list[Path]:
    """throughput.png (frames/s per run, raw decode as a line) and latency_cdf.png (sample latency CDFs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    names = [label(r) for r in results]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(results)), 4))
    ax.bar(
        names,
        [r["metrics"].get("frames_per_s_node", r["metrics"]["frames_per_s"]) for r in results],
        color=["tab:blue" if r["config"]["loader"] in ("stream", "map") else "tab:gray" for r in results],
    )
    if reference:
        ax.axhline(reference["frames_per_s"], color="tab:red", linestyle="--", label="raw decode (all cores)")
        ax.legend()
    ax.set_ylabel("camera frames / s / node")
    ax.set_title("Delivered frames per second")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    throughput = folder / "throughput.png"
    fig.savefig(throughput, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, result in zip(names, results):
        cdf = result["metrics"]["latency_cdf_ms"]
        ax.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("sample latency (ms, worker time per sample)")
    ax.set_ylabel("fraction of samples")
    ax.set_title("Sample latency CDF")
    ax.legend(fontsize=8)
    fig.tight_layout()
    latency = folder / "latency_cdf.png"
    fig.savefig(latency, dpi=110)
    plt.close(fig)
    return [throughput, latency]


def render(folder: Path) -> str:
    """report.md and the plots from the result files in `folder`; returns the markdown."""
    results, reference = load_results(folder)
    if not results:
        raise FileNotFoundError(
            f"{folder}: no benchmark result files (*.json with config and metrics) found; "
            "run `robostream bench --out DIR` first"
        )
    text = markdown(results, reference)
    (Path(folder) / "report.md").write_text(text)
    plots(folder, results, reference)
    return text
