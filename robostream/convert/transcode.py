"""`robostream transcode`: a LeRobot v3.0 dataset re-encoded for GPU decoding, on the converter's engine.

NVDEC on the GPUs most training runs on (A100, H100, H200) has no AV1, lerobot's default codec; and any decoder
seeks fastest in short closed GOPs without B-frames. This re-encodes the chosen cameras (default: every RGB video
camera) to H.264, HEVC or AV1 with a keyframe every `gop` frames and no B-frames, every frame at its own
presentation time (so the episode table and every `timestamp` stay exact), and keeps the rest of the dataset
untouched (transcode_job.py). One task per camera file, run by the same workers, executors, leases, finalize and
atomic swap as `convert` (run.py `run_job`): resumable after kill -9, never a partial output at OUT.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from robostream.convert.executors import EngineOptions
from robostream.convert.finish import finished_output
from robostream.convert.manifest import WorkDir
from robostream.convert.run import check_engine_arguments, run_job
from robostream.convert.transcode_file import TargetCodec
from robostream.convert.transcode_plan import TranscodePlan, make_transcode_plan, transcode_settings
from robostream.convert.worker import WorkerOptions
from robostream.errors import RobostreamError


def _load_or_save_plan(work: Path, wanted: TranscodePlan, log) -> TranscodePlan:
    """The work dir's plan when it is this transcode's (else refused), or `wanted`, saved there."""
    plan = TranscodePlan.load(work / "plan.json")
    if plan is not None:
        if (plan.source, plan.fingerprint) != (wanted.source, wanted.fingerprint):
            raise RobostreamError(
                f"{work}: holds another transcode ({plan.source}, {plan.settings}, cameras {plan.cameras}) or its "
                "input changed since; remove it or choose another --work-dir"
            )
        log(f"resuming the transcode planned in {work}")
        return plan
    report = {"source": wanted.source, "cameras": wanted.cameras, "files": len(wanted.files)}
    log("preflight: " + json.dumps(report))
    try:
        wanted.save(WorkDir(work).plan_path)
    except OSError as exc:
        raise RobostreamError(
            f"{work}: cannot write the plan ({exc}); free space there or choose another --work-dir on the "
            "output's filesystem"
        ) from exc
    return wanted


def transcode(
    src: str | Path,
    *,
    out: str | Path,
    codec: TargetCodec,
    gop: int,
    crf: int | None = None,
    preset: str | int | None = None,
    cameras: Sequence[str] | None = None,
    work_dir: str | Path | None = None,
    workers: int = 1,
    executor: Literal["local", "datatrove-local", "slurm", "ray"] = "local",
    engine: EngineOptions = EngineOptions(),
    lease_s: float = 60.0,
    max_attempts: int = 3,
    dry_run: bool = False,
    log=print,
) -> dict[str, Any]:
    """Re-encode the cameras of the v3.0 dataset at `src` into a new dataset at `out` (see the module docstring).

    Args:
        src: the v3.0 dataset folder (read only).
        out: where the transcoded dataset appears, whole, at the end (must not exist, unless it holds this
            transcode's finished result: then nothing is done).
        codec: "h264", "hevc" or "av1".
        gop: a keyframe every `gop` frames (1: every frame).
        crf: constant-quality level; None: the codec's default (transcode_file.DEFAULT_CRF).
        preset: the encoder's speed preset; None: the codec's default (transcode_file.DEFAULT_PRESET).
        cameras: the cameras to re-encode; None: every RGB video camera. Depth cameras are refused (lossless).
        work_dir: plan, leases and the dataset being built; default beside `out`, on its filesystem. Rerunning the
            same command with the same work dir resumes.
        workers: processes (local) or datatrove tasks re-encoding files in parallel.
        executor: "local", "datatrove-local", "slurm" or "ray" (as `convert`).
        engine: datatrove executor options.
        lease_s: how long a task's lease lives without a heartbeat before another worker may take it over.
        max_attempts: failures of one file (since this call) that fail the transcode.
        dry_run: check and plan only.
        log: where progress lines go.
    Returns:
        A summary (files, frames, bytes, seconds, frames per second), printed by the CLI as JSON.
    """
    started = time.time()
    settings = transcode_settings(codec=codec, gop=gop, crf=crf, preset=preset)
    check_engine_arguments(workers=workers, executor=executor, lease_s=lease_s, max_attempts=max_attempts)
    root = Path(src).absolute()
    wanted = make_transcode_plan(root, settings, cameras)  # SRC and --cameras checked before OUT is looked at
    source_info: dict[str, Any] = json.loads((root / "meta" / "info.json").read_text())  # the plan checked it

    def same_transcode(made: dict[str, Any]) -> bool:
        counts = all(made.get(k) == source_info.get(k) for k in ("total_episodes", "total_frames", "fps"))
        infos = [made.get("features", {}).get(key, {}).get("info", {}) for key in wanted.cameras]
        return counts and all(i.get("video.codec") == codec and i.get("video.g") == settings.gop for i in infos)

    finished = finished_output(out, work_dir, matches=same_transcode)
    if finished is not None:
        log(f"{finished}: already holds this transcode of {root} and none of it is under way: nothing to do")
        return {"output": str(finished), "already_transcoded": True, "seconds": round(time.time() - started, 3)}
    summary, plan = run_job(
        root,
        out,
        work_dir,
        lambda targets: _load_or_save_plan(targets.work, wanted, log),
        workers=workers,
        executor=executor,
        engine=engine,
        options=WorkerOptions(lease_s=lease_s, max_attempts=max_attempts, since=started),
        dry_run=dry_run,
        command="transcode",
        log=log,
    )
    if plan is None or "files_resumed" not in summary:  # not finished here (see run_job)
        return summary
    frames = int(source_info["total_frames"]) * len(plan.cameras)
    return {
        **summary,
        "cameras": plan.cameras,
        "codec": settings.codec,
        "gop": settings.gop,
        "crf": settings.crf,
        "preset": settings.preset,
        "frames_transcoded": frames,
        "frames_per_s": round(frames / max(summary["seconds_files"], 1e-9), 1),
    }
