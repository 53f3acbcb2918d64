"""`robostream bench` on a remote source: the dataset served over HTTP with Range support on 127.0.0.1, read by the
probe processes and their DataLoader workers; the figures name the remote bytes."""

import json

from robostream.cli import main

from .servers import RangeHTTPServer


def test_bench_reads_an_http_dataset(av1_root, tmp_path):
    with RangeHTTPServer(av1_root) as server:
        url = server.url
        assert (
            main(
                [
                    "bench",
                    url,
                    "--mode",
                    "single",
                    "--loader",
                    "stream",
                    "map",
                    "--batch_size",
                    "4",
                    "--num_workers",
                    "1",
                    "--num_batches",
                    "2",
                    "--split_samples",
                    "4",
                    "--read_buffer",
                    "4mb",
                    "--storage_options",
                    '{"block_size": 65536}',
                    "--out",
                    str(tmp_path),
                ]
            )
            == 0
        )
        served = server.stats()
    stream = json.loads((tmp_path / "remote_stream_single_b4_w1_cpu.json").read_text())
    assert stream["config"]["root"] == url and stream["metrics"]["samples"] == 8
    read_options = stream["config"]["read_options"]
    assert read_options["read_buffer"] == "4mb" and read_options["storage_options"] == {"block_size": 65536}
    assert stream["metrics"]["bytes_read"] > 0  # the streaming dataset counts what it fetched
    mapped = json.loads((tmp_path / "remote_map_single_b4_w1_cpu.json").read_text())
    assert mapped["metrics"]["samples"] == 8 and mapped["metrics"]["frames_per_s"] > 0
    assert any(path.endswith(".mp4") for path in served)  # the videos really came over HTTP
