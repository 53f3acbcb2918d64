"""A remote data file that many row threads open at once (a pass's first pieces are read ahead together) is opened
once per process: its footer in one request, which tells its version too, whatever the threads; the row groups of every episode
waiting for it are then asked for together, merged; a failed open reaches every waiting thread as the opener's
error, and a later read tries again."""

from __future__ import annotations

import pytest

from robostream import ReadOptions
from robostream.errors import DatasetFormatError
from robostream.format.data_rows import DataRowReader
from robostream.format.metadata import load_metadata
from robostream.storage.retry import RetryPolicy
from robostream.synth import SynthConfig, generate

from .servers import RangeHTTPServer

FAST = ReadOptions(retry=RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0))
EPISODES = 12
CONFIG = SynthConfig(episodes=EPISODES, cameras=1, height=48, width=64, episode_length=8, state_dim=3, seed=4)


@pytest.fixture(scope="module")
def one_data_file(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("open") / "ds", CONFIG)


def _read_all(meta, threads: int = 8) -> list:
    """Every episode's rows asked for at once from `threads` row threads, then taken (errors as values)."""
    reader = DataRowReader(meta, read_ahead_threads=threads)
    episodes = [int(e) for e in meta.episodes.episode_index]
    for episode in episodes:
        reader.read_ahead(episode)
    taken = []
    for episode in episodes:
        try:
            taken.append(reader.episode(episode))
        except DatasetFormatError as exc:
            taken.append(exc)
    return taken


def test_row_threads_open_a_remote_data_file_once(one_data_file):
    # 50 ms per request: the 8 threads all ask for the file while its first HEAD is under way
    with RangeHTTPServer(one_data_file.parent, latency_s=0.05) as server:
        meta = load_metadata(server.url_for("ds"), read_options=FAST)
        (relative,) = {meta.data_file(int(e)) for e in meta.episodes.episode_index}
        server.reset_stats()
        rows = _read_all(meta)
        requests = server.stats()[f"/ds/{relative}"]["requests"]
    assert [len(r) for r in rows] == [int(n) for n in meta.episodes.length]
    # its tail asked for at the open, which holds the whole (small) file and tells its version (no HEAD): every
    # episode's row groups come from it (a file opened by each thread: 8 requests here, 16 with a HEAD each)
    assert requests == 1, requests


def test_waiting_episodes_row_groups_are_asked_for_together(tmp_path):
    # 12 episodes of ~290 KB rows: a 3.5 MB data file, of which the tail asked for at the open holds the last two
    config = SynthConfig(episodes=EPISODES, cameras=1, height=48, width=64, episode_length=100, state_dim=256, seed=4)
    root = generate(tmp_path / "ds", config)
    # 0.2 s per request: all 12 episodes are waiting long before the file's HEAD and tail are back
    with RangeHTTPServer(root.parent, latency_s=0.2) as server:
        meta = load_metadata(server.url_for("ds"), read_options=FAST)
        (relative,) = {meta.data_file(int(e)) for e in meta.episodes.episode_index}
        server.reset_stats()
        rows = _read_all(meta, threads=2)
        requests = server.stats()[f"/ds/{relative}"]["requests"]
    assert [len(r) for r in rows] == [int(n) for n in meta.episodes.length]
    # the tail (with the version), and the other episodes' row groups merged into requests of at most 2 MiB (3 MB:
    # 2 of them); read by the 2 threads one episode after another, they took a request each (11 here)
    assert requests == 3, requests


def test_every_waiting_thread_gets_the_openers_error(tmp_path):
    root = generate(tmp_path / "ds", CONFIG)
    with RangeHTTPServer(root.parent, latency_s=0.05) as server:
        meta = load_metadata(server.url_for("ds"), read_options=FAST)
        (relative,) = {meta.data_file(int(e)) for e in meta.episodes.episode_index}
        (root / relative).write_bytes(b"not a parquet file" * 100)
        rows = _read_all(meta)
    assert all(isinstance(r, DatasetFormatError) for r in rows), rows
    assert all("not a readable parquet file" in str(r) and relative in str(r) for r in rows)
