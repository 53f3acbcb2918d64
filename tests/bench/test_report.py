"""The benchmark's text report from hand-made results: the per-stage table and the CSV's dotted names."""

from robostream.bench.report import flat_row, markdown


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
