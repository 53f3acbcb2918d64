"""The benchmark's text report from hand-made results: the per-stage table and the CSV's dotted names."""

from robostream.bench.report import cost_line, flat_row, local_twin, markdown, quiet_note


def _result():
    stages = {
        "fetch": {"tasks": 7, "busy_s": None, "wait_s": 0.3, "threads": None, "occupancy": None},
        "decode": {"tasks": 10, "busy_s": 2.0, "wait_s": 1.5, "threads": 2, "occupancy": 0.5},
    }
    metrics = {"frames_per_s": 100.0, "shuffle_randomness_frac": 0.5, "uniform_randomness_frac": 0.6}
    return {
        "config": {"loader": "stream", "mode": "single"},
        "metrics": {**metrics, "latency_cdf_ms": [1.0, 2.0], "worker_wall_s": 2.0, "stages": stages},
    }


def test_the_report_prints_each_stage():
    lines = markdown([_result()], None).splitlines()
    start = lines.index("| stage | tasks | busy s | ms/task | wait s | threads | occupancy % |")
    assert lines[start - 1].startswith("Stages, robostream stream / single (the workers' loops: 2.00 s")
    assert lines[start + 2] == "| fetch | 7 | - | - | 0.30 | - | - |"  # a result without fetch's busy time
    assert lines[start + 3] == "| decode | 10 | 2.00 | 200.00 | 1.50 | 2 | 50.0 |"


def test_the_csv_row_names_nested_figures_with_dots():
    row = flat_row(_result())
    assert row["stages.decode.occupancy"] == 0.5 and row["stages.fetch.busy_s"] is None
    assert "latency_cdf_ms" not in row and row["loader"] == "stream"


def _run(label, store, samples_per_s, cpu_per_1000, **extra):
    config = {"loader": "stream", "mode": "single", "label": label, "root": "/data/ds", "store": store}
    if store:
        config["root"] = "http://127.0.0.1:4000"
    metrics = {
        "samples_per_s": samples_per_s,
        "client_cpu_s": 2.0,
        "client_workers_cpu_s": 1.5,
        "client_cpu_s_per_1000_samples": cpu_per_1000,
        **extra,
    }
    return {"config": config, "metrics": metrics}


def test_a_run_through_the_store_is_set_beside_its_local_twin():
    local = _run("local", None, 2000.0, 0.8, run_samples_per_s=1800.0)
    remote = _run(
        "slow50ms",
        {"latency_ms": 50.0},
        1600.0,
        1.0,
        run_samples_per_s=1260.0,
        requests_per_sample=0.14,
        bytes_per_sample=40_000.0,
        requests_per_mb=3.5,
        bytes_per_delivered_frame=13_000.0,
        read_wait_s_per_1000_samples=0.25,
        store_cpu_s=0.6,
    )
    other = {**local, "config": {**local["config"], "num_workers": 4}}  # another configuration: no twin
    assert local_twin(remote, [other, local, remote]) is local and local_twin(local, [local, remote]) is None
    assert cost_line(remote, local) == (
        "Costs, slow50ms robostream stream / single: client CPU 1.00 s per 1,000 samples (75% workers); whole run "
        "1260 samples/s (start-up included); readers waited 0.25 s per 1,000 samples; 0.140 requests and 40.0 KB per "
        "sample, 3.50 requests per MB, 13.0 KB per delivered camera frame; store CPU 0.60 s; vs local: samples/s "
        "0.80x, whole run 0.70x, client CPU per sample 1.25x"
    )
    assert cost_line(local, None) == (
        "Costs, local robostream stream / single: client CPU 0.80 s per 1,000 samples (75% workers); whole run 1800 "
        "samples/s (start-up included)"
    )


def test_the_reference_line_says_whether_the_machine_was_quiet():
    """A reference that moved between before and after, or a machine busy before the runs, flatters or hides the
    "x raw decode" ratios: the report says so next to them."""
    base = {"runs_frames_per_s": [4100.0, 3950.0], "runs_load_1min": [0.4, 1.9], "cores": 2}
    assert quiet_note(base).startswith(" Machine quiet: the reference moved 4%, load 0.40 before on 2 cores")
    assert "NOT quiet" in quiet_note({**base, "runs_frames_per_s": [4500.0, 3400.0]})  # moved 24%
    assert "NOT quiet" in quiet_note({**base, "runs_load_1min": [1.6, 1.9]})  # busy before the runs
    assert quiet_note({"runs_frames_per_s": [4000.0]}) == ""  # measured once: nothing to say
