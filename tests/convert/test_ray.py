"""The converter's Ray executor (`--executor ray`: datatrove's RayPipelineExecutor, the converter's only Ray path) on
a local Ray cluster that this module starts once: its output equals the local pool's, and a file that keeps failing
fails the run naming it. Ray is a test requirement: without it these tests fail, they do not skip."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.convert.worker import ConversionFailed
from tests.helpers import DATA_MB, VIDEO_MB, copy_tree

RAY_CPUS = 2
# Logical memory to schedule by: what datatrove reserves for the tasks (2 GB per CPU by default), declared so the
# tasks are scheduled on any runner, not only where Ray finds that much memory free
RAY_MEMORY_BYTES = RAY_CPUS * 2 * 2**30


def quiet(line: str) -> None:
    pass


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster (2 CPUs, no dashboard) shared by this module's tests (its start-up is their main cost),
    shut down and its folder removed afterwards, also when a test fails."""
    import ray  # here, not at the top: without ray these tests fail, and the rest of the suite still runs

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    try:
        # TMPDIR: datatrove's Ray tasks write their logs under tempfile.gettempdir(); keep them in the removed folder
        ray.init(
            num_cpus=RAY_CPUS,
            _memory=RAY_MEMORY_BYTES,
            include_dashboard=False,
            _temp_dir=temp_dir,
            runtime_env={"env_vars": {"TMPDIR": temp_dir}},
        )
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_executor_writes_what_the_local_pool_writes(
    ray_cluster: None, v21_root: Path, reference: Path, tmp_path: Path
):
    import ray

    summary = convert(
        v21_root,
        out=tmp_path / "out",
        workers=2,
        executor="ray",
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=quiet,
    )
    assert compare_datasets(tmp_path / "out", reference) == []
    assert summary["executor"] == "ray" and summary["files_resumed"] == 0
    assert ray.is_initialized()  # the caller's cluster is left running for its next job
    assert ray.cluster_resources()["CPU"] == RAY_CPUS  # the tasks ran on this module's cluster, not a new one


def test_a_file_that_keeps_failing_on_ray_fails_the_run_naming_it(ray_cluster: None, v21_root: Path, tmp_path: Path):
    """datatrove's Ray executor logs a failed task and returns; the run must still fail with the file's error."""
    root = copy_tree(v21_root, tmp_path / "ds")
    args = dict(out=tmp_path / "out", data_file_size_in_mb=DATA_MB, video_file_size_in_mb=VIDEO_MB, log=quiet)
    convert(root, dry_run=True, **args)  # planned: the input sizes are recorded
    victim = root / "videos/chunk-000/observation.images.cam1/episode_000003.mp4"
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(ConversionFailed, match="failed 3 times") as failed:
        convert(root, workers=1, executor="ray", **args)
    assert str(victim) in str(failed.value) and "changed" in str(failed.value)
    assert not (tmp_path / "out").exists()
