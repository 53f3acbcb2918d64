"""`robostream bench` end to end: real probe processes, DataLoader workers, result files, the report and plots, and
a real 2-process torchrun job whose ranks' figures are gathered over gloo."""

import csv
import json
import re

import pytest

from robostream.cli import main
from tests.helpers import fail_unless_ranks, run_torchrun

ARGS = ["--batch_size", "4", "--num_workers", "1", "--num_batches", "3", "--split_samples", "8"]


@pytest.fixture(scope="module")
def bench_out(av1_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert (
        main(
            [
                "bench",
                "--root",
                str(av1_root),
                "--mode",
                "single",
                "sarm",
                "--loader",
                "stream",
                "map",
                *ARGS,
                "--reference",
                "decode",
                "--reference_frames",
                "60",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_every_run_writes_its_figures(bench_out):
    names = sorted(p.name for p in bench_out.glob("*.json"))
    assert names == [
        "local_map_sarm_b4_w1_cpu.json",
        "local_map_single_b4_w1_cpu.json",
        "local_stream_sarm_b4_w1_cpu.json",
        "local_stream_single_b4_w1_cpu.json",
        "reference_decode.json",
    ]
    for name in names[:-1]:
        result = json.loads((bench_out / name).read_text())
        m, config = result["metrics"], result["config"]
        window = 8 if config["mode"] == "sarm" else 1
        assert m["batches"] == 3 and m["samples"] == 12 and m["frames_delivered"] == 12 * window * 2  # 2 cameras
        assert m["frames_per_s"] > 0 and m["first_batch_latency_s"] > m["built_s"] > 0
        assert 0 < m["p50_sample_latency_ms"] <= m["p95_sample_latency_ms"] <= m["p99_sample_latency_ms"]
        assert m["peak_rss_mib"] > m["baseline_rss_mib"] > 0  # workers were counted
        assert 0 < m["peak_pss_mib"] < m["peak_rss_mib"]  # shared pages split among processes, not repeated
        assert 0 < m["peak_worker_pss_mib"] < m["peak_pss_mib"]  # one worker's share of the tree's
        assert 0 < m["shuffle_randomness_frac"] <= 1 and 0 < m["uniform_randomness_frac"] <= 1
        assert 0 <= m["data_wait_frac"] <= 1
        assert m["fetch_ms_per_sample"] > 0 and m["decode_ms_per_sample"] > 0
        cache = m["video_decoder_cache"]
        assert cache["misses"] >= 1 and cache["hits"] + cache["misses"] > 0 and 0 <= cache["hit_rate"] <= 1
        assert result["info"]["decoder"] == "torchcodec"
        stages = m["stages"]  # the worker's read path, stage by stage (map-style: rows are not a stage of it)
        ran = {"rows", "decode", "assemble"} if config["loader"] == "stream" else {"decode", "assemble"}
        assert ran <= set(stages) and m["worker_wall_s"] > 0
        assert all(s["tasks"] > 0 and s["busy_s"] > 0 and 0 <= s["wait_s"] for s in stages.values())
        assert stages["assemble"]["tasks"] >= m["batches"]  # one per batch (warm-up batches included)
        if config["loader"] == "stream":  # short runs include the look-ahead of live pieces: no tight bound here
            assert m["decoded_per_delivered"] > 0
        else:  # map-style decodes what a sample asks for, nothing ahead
            assert m["decoded_per_delivered"] == 1.0
    reference = json.loads((bench_out / "reference_decode.json").read_text())
    assert 0 < reference["frames"] <= 60 and reference["frames_per_s"] > 0  # the same share of every file
    assert len(reference["runs_frames_per_s"]) == 2  # measured before and after the runs
    assert len(reference["runs_load_1min"]) == 2 and reference["cores"] >= 1  # how quiet the machine was
    # the same decoding laid out as samples hold them, before and after too
    assert reference["laid_out_frames_per_s"] > 0 and len(reference["runs_laid_out_frames_per_s"]) == 2


def test_csv_holds_one_row_per_run(bench_out):
    with open(bench_out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["loader"], r["mode"]) for r in rows) == [
        ("map", "sarm"),
        ("map", "single"),
        ("stream", "sarm"),
        ("stream", "single"),
    ]
    assert all(float(r["frames_per_s"]) > 0 and "video_decoder_cache.hit_rate" in r for r in rows)
    assert all(float(r["stages.decode.busy_s"]) > 0 for r in rows)  # nested: dotted


def test_report_renders_table_and_plots(bench_out, capsys):
    assert main(["bench-report", str(bench_out)]) == 0
    text = (bench_out / "report.md").read_text()
    assert text.count("| robostream stream") == 2 and "x raw decode" in text and "x laid-out decode" in text
    assert re.search(r"Laid out \(.*\): \d+ frames/s, \d\.\d\dx the raw decode", text)
    assert re.search(r"Machine (quiet|NOT quiet: compare the ratios with care): the reference moved \d+%, load", text)
    assert text.count("| stage | tasks | busy s |") == 4  # each run's stages
    for png in ("throughput.png", "latency_cdf.png"):
        assert (bench_out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_fail_clearly(av1_root, tmp_path, capsys):
    assert main(["bench", "--out", str(tmp_path)]) == 2
    assert "needs a dataset" in capsys.readouterr().err
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--peer",
                "lerobot",
                "--loader",
                "stream",
                "--mode",
                "single",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "--peer_python" in capsys.readouterr().err
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--delta_timestamps",
                '{"observation.images.cam0": [0.013]}',
                *ARGS,
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "0.013" in capsys.readouterr().err  # not a multiple of 1/fps
    assert main(["bench-report", str(tmp_path / "empty")]) == 2
    assert "no benchmark result files" in capsys.readouterr().err


def test_torchrun_gathers_both_ranks(av1_root, tmp_path):
    proc = run_torchrun(
        [
            "--nproc_per_node",
            "2",
            "-m",
            "robostream.bench",
            str(av1_root),
            "--mode",
            "single",
            "--loader",
            "stream",
            "map",
            *ARGS,
            "--out",
            str(tmp_path),
        ],
        timeout=300,
    )
    fail_unless_ranks(proc, len(list(tmp_path.glob("*_rank*.json"))), 4, "result files (2 loaders x 2 ranks)")
    for loader in ("stream", "map"):
        job = json.loads((tmp_path / f"local_{loader}_single_b4_w1_cpu.json").read_text())
        ranks = [json.loads((tmp_path / f"local_{loader}_single_b4_w1_cpu_rank{r}.json").read_text()) for r in (0, 1)]
        assert job["world_size"] == 2 and [r["rank"] for r in job["per_rank"]] == [0, 1]
        assert job["metrics"]["samples"] == sum(r["metrics"]["samples"] for r in ranks) == 24
        assert job["metrics"]["frames_per_s"] == pytest.approx(sum(r["metrics"]["frames_per_s"] for r in ranks))
        assert job["metrics"]["frames_per_s_node"] == pytest.approx(job["metrics"]["frames_per_s"])  # one node


def test_a_mixture_is_benchmarked_with_per_source_counts(av1_root, tmp_path, capsys):
    """--sources: the streaming loader over a mixture (here two episode selections of one dataset, the second
    upsampled 2x), run to the end of its epoch: the per-source counts are the mixture's exact epoch counts."""
    from robostream.format.metadata import load_metadata

    lengths = load_metadata(av1_root).episodes.length
    sources = [
        {"root": str(av1_root), "episodes": [0, 1, 2]},
        {"root": str(av1_root), "episodes": [3, 4, 5, 6], "repeat": 2},
    ]
    spec = tmp_path / "sources.json"
    spec.write_text(json.dumps(sources))
    assert (
        main(
            [
                "bench",
                "--sources",
                f"@{spec}",
                "--mode",
                "single",
                "--batch_size",
                "4",
                "--num_workers",
                "1",
                "--num_batches",
                "1000",
                "--split_samples",
                "8",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "out" / "local_mix2_stream_single_b4_w1_cpu.json").read_text())
    assert result["metrics"]["samples_per_source"] == [int(lengths[:3].sum()), 2 * int(lengths[3:].sum())]
    assert result["info"]["sources"] == 2 and 0 < result["info"]["construction_s"] < 60
    report = capsys.readouterr().err
    assert "samples per source" in report and "construction" in report and "MiB per source" in report
    for batching, tag in (("per_stream", "perstream"), ("stratified", "stratified")):
        assert (
            main(
                [
                    "bench",
                    "--sources",
                    f"@{spec}",
                    "--batching",
                    batching,
                    "--mode",
                    "single",
                    "--batch_size",
                    "4",
                    "--num_workers",
                    "1",
                    "--num_batches",
                    "1000",
                    "--split_samples",
                    "8",
                    "--out",
                    str(tmp_path / "out"),
                ]
            )
            == 0
        )
        lanes = json.loads((tmp_path / "out" / f"local_mix2_{tag}_stream_single_b4_w1_cpu.json").read_text())
        assert lanes["metrics"]["samples_per_source"] == result["metrics"]["samples_per_source"]
    assert main(["bench", str(av1_root), "--batching", "per_stream", "--out", str(tmp_path / "x")]) == 2
    assert main(["bench", "--sources", f"@{spec}", "--loader", "map", "--out", str(tmp_path / "x")]) == 2
    assert main(["bench", str(av1_root), "--sources", f"@{spec}", "--out", str(tmp_path / "x")]) == 2
    assert main(["bench", "--sources", "[1]", "--out", str(tmp_path / "x")]) == 2


def test_the_slow_store_serves_the_dataset_and_reports_requests_in_flight(av1_root, tmp_path, capsys):
    """--store_*: the local dataset is read through the slow store on 127.0.0.1 (latency, a cap on requests in
    flight); every run records what it asked of the store, and the table says it."""
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--mode",
                "single",
                "--loader",
                "stream",
                "map",
                "--store_latency_ms",
                "5",
                "--store_max_in_flight",
                "3",
                *ARGS,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    for loader in ("stream", "map"):
        result = json.loads((out / f"slow5ms_{loader}_single_b4_w1_cpu.json").read_text())
        assert result["config"]["root"].startswith("http://127.0.0.1:")
        assert result["config"]["store"] == {"latency_ms": 5.0, "mbps": None, "max_in_flight": 3, "api": "http"}
        store = result["metrics"]["store"]
        assert store["requests"] > 0 and store["bytes"] > 0 and 1 <= store["in_flight_max"] <= 3
        assert 0 < store["in_flight_mean"] <= 3 and store["cpu_s"] > 0
        assert store["frame_bytes"] > 0 and result["metrics"]["run_frames"] > 0
        fetch = result["metrics"]["stages"]["fetch"]  # the workers' counters: the store's requests and their time
        assert fetch["tasks"] > 0 and fetch["busy_s"] >= fetch["tasks"] * 0.005 and fetch["occupancy"] is not None
        assert "read_wait_us" in result["metrics"]
    err = capsys.readouterr().err
    assert "Slow store (latency_ms 5, max_in_flight 3, api http), " in err and "x the frames' video bytes" in err
    assert "readers waited" in err and "; store CPU " in err and "client CPU " in err
    assert main(["bench", "http://127.0.0.1:9/ds", "--store_latency_ms", "5", "--out", str(tmp_path / "x")]) == 2
    assert "serve a local dataset folder" in capsys.readouterr().err
    assert main(["bench", str(av1_root), "--store_mbps", "0", "--out", str(tmp_path / "x")]) == 2


def test_the_slow_store_speaks_the_hub_api(av1_root, tmp_path, capsys):
    """--store_api hub: the dataset is a repo of the loopback Hub emulator (latency on every request) and the
    readers take it as a Hub dataset (huggingface_hub pointed at 127.0.0.1), requests overlapping."""
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--mode",
                "single",
                "--loader",
                "stream",
                "--store_api",
                "hub",
                "--store_latency_ms",
                "20",
                *ARGS,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "hub20ms_stream_single_b4_w1_cpu.json").read_text())
    assert result["config"]["root"] is None and result["config"]["repo_id"] == f"bench/{av1_root.name}"
    store = result["metrics"]["store"]
    assert store["requests"] > 0 and store["bytes"] > 0 and store["in_flight_max"] > 1
    assert "Slow store (latency_ms 20, api hub), " in capsys.readouterr().err
    for wrong in (["--store_api", "hub"], ["--store_api", "hub", "--store_latency_ms", "5", "--peer", "lerobot"]):
        assert main(["bench", str(av1_root), *wrong, "--out", str(tmp_path / "x")]) == 2
    assert "the peers that read that store are ['lerobot-stream']" in capsys.readouterr().err


def test_the_slow_store_speaks_s3(av1_root, tmp_path, capsys):
    """--store_api s3: the dataset is a bucket of the slow store's S3 dialect (s3://, an endpoint on 127.0.0.1)."""
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--mode",
                "single",
                "--loader",
                "map",
                "--store_api",
                "s3",
                "--store_latency_ms",
                "20",
                *ARGS,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "s320ms_map_single_b4_w1_cpu.json").read_text())
    assert result["config"]["root"] == f"s3://{av1_root.name}"
    storage_options = result["config"]["read_options"]["storage_options"]
    assert storage_options["client_kwargs"]["endpoint_url"].startswith("http://127.0.0.1:")
    store = result["metrics"]["store"]
    assert store["requests"] > 0 and store["bytes"] > 0 and store["in_flight_max"] > 1
    assert "Slow store (latency_ms 20, api s3), " in capsys.readouterr().err
