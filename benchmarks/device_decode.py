"""Issue 37 on the GPU machine: torchcodec's NVDEC decoding against the CPU, AV1 on CUDA, our loaders with the decode
device on cpu and cuda, and CPU decoding through the streaming loader on 1..14 workers of 16 cores.

Run by benchmarks/device_run.sh (which unpacks torchcodec, FFmpeg and the datasets from .devbundle/ and sets
PYTHONPATH and LD_LIBRARY_PATH); writes `device_decode.json` to --out and prints each result as it comes. Each step
runs under `_guarded`: a failure is recorded verbatim (type, message, traceback tail) and the next step runs, since one
run on a lent machine has to bring back every answer it can. Steps past the time budget are recorded as skipped.

    python benchmarks/device_decode.py --bundle .devbundle --out OUT --group GROUP [--budget_s 330]

One process per group (device_run.sh runs them in turn): a crash inside a native library (a segfault) ends only its
group, and the results of every group gather in the one JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch

CudaBackend = Literal["ffmpeg", "beta"]
RAW_STEP_S = 3.0  # timed seconds of each raw-decode measurement
BENCH_DURATION_S = 3.0  # timed seconds of each loader configuration
SCALING_WORKERS = tuple(int(n) for n in os.environ.get("SCALING_WORKERS", "1 2 4 8 14").split())
# which loader runs, as device:workers (a rerun asks for the ones the last run had no time for)
LOADER_RUNS = [run.split(":") for run in os.environ.get("LOADER_RUNS", "cuda:1 cpu:1 cuda:2 cpu:2 cuda:0").split()]


class Recorder:
    """The results so far, written to disk after every step (a killed run still leaves what it measured)."""

    def __init__(self, *, out: Path, budget_s: float) -> None:
        self.path = out / "device_decode.json"
        self.deadline = time.monotonic() + budget_s
        self.results: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def guarded(self, name: str, step: Callable[[], Any], *, needs_s: float = 0.0) -> Any:
        """Run `step`, record its result (or its failure, verbatim) under `name`; None when it failed or was skipped.

        Args:
            name: the result's key.
            step: the measurement.
            needs_s: seconds the step needs; it is skipped when fewer are left in the budget.
        """
        left = self.deadline - time.monotonic()
        if left < needs_s:
            self.results[name] = {"skipped": f"out of time: {left:.0f} s left, the step needs {needs_s:.0f} s"}
            print(f"--- {name}: skipped ({left:.0f} s left)", flush=True)
            self._write()
            return None
        print(f"--- {name} ...", flush=True)
        started = time.monotonic()
        try:
            value = step()
        # the device run must go on past any one failure, and the failure's text is itself the finding
        except Exception as exc:  # noqa: BLE001
            self.results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
                "seconds": round(time.monotonic() - started, 2),
            }
            print(f"--- {name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            self._write()
            return None
        self.results[name] = value
        print(f"--- {name} ({time.monotonic() - started:.1f} s): {json.dumps(value, default=str)[:1500]}", flush=True)
        self._write()
        return value

    def _write(self) -> None:
        self.path.write_text(json.dumps(self.results, indent=2, default=str))


def videos(root: Path) -> list[Path]:
    files = sorted(root.glob("videos/**/*.mp4"))
    if not files:
        raise FileNotFoundError(f"{root}: no videos/**/*.mp4; make the dataset with `robostream synth` first")
    return files


def open_decoder(path: Path, *, device: str, backend: CudaBackend = "ffmpeg") -> Any:
    from torchcodec.decoders import VideoDecoder, set_cuda_backend

    if not device.startswith("cuda"):
        return VideoDecoder(str(path), device=device, seek_mode="approximate")
    with set_cuda_backend(backend):
        return VideoDecoder(str(path), device=device, seek_mode="approximate")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def environment() -> dict[str, Any]:
    import torchcodec
    from torchcodec._core import get_ffmpeg_library_versions

    from robostream.video.decoder import default_backend

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torchcodec": torchcodec.__version__,
        "torchcodec_ffmpeg": get_ffmpeg_library_versions(),
        "robostream_default_backend": default_backend(),
        "cpu_count": os.cpu_count(),
    }


def pyav_environment() -> dict[str, Any]:
    import av

    return {"pyav": av.__version__, "pyav_ffmpeg": av.library_versions}


def first_frame(path: Path, *, device: str, backend: CudaBackend) -> dict[str, Any]:
    """Open one file and decode its first frame: does decoding on `device` initialise, and did it fall back to CPU?"""
    started = time.perf_counter()
    decoder = open_decoder(path, device=device, backend=backend)
    opened = time.perf_counter()
    frame = decoder.get_frame_at(0).data
    sync(device)
    done = time.perf_counter()
    return {
        "file": str(path),
        "open_s": round(opened - started, 3),
        "first_frame_s": round(done - opened, 3),
        "shape": list(frame.shape),
        "tensor_device": str(frame.device),
        "cpu_fallback": str(decoder.cpu_fallback),
    }


def raw_decode(files: list[Path], *, device: str, backend: CudaBackend) -> dict[str, Any]:
    """One process, one decoder at a time: sequential frames/s (30-frame ranges through each file), random-access
    frames/s (single frames at random indices, as a loader's `single` mode asks), and 32 random frames per call."""
    rng = random.Random(0)
    decoders = [open_decoder(path, device=device, backend=backend) for path in files]
    meta = decoders[0].metadata
    result: dict[str, Any] = {
        "resolution": f"{meta.width}x{meta.height}",
        "codec": meta.codec,
        "files": len(files),
        "cpu_fallback": str(decoders[0].cpu_fallback),
    }

    def timed(name: str, call: Callable[[Any, int], int]) -> None:
        frames = 0
        step = 0
        started = time.perf_counter()
        while time.perf_counter() - started < RAW_STEP_S:
            decoder = decoders[step % len(decoders)]
            frames += call(decoder, step)
            step += 1
        sync(device)
        result[f"{name}_frames_per_s"] = round(frames / (time.perf_counter() - started), 1)

    def sequential(decoder: Any, step: int) -> int:
        count = len(decoder)
        start = (step // len(decoders) * 30) % max(count - 30, 1)
        return len(decoder.get_frames_in_range(start, min(start + 30, count)).data)

    def random_single(decoder: Any, step: int) -> int:
        decoder.get_frame_at(rng.randrange(len(decoder)))
        return 1

    def random_batch(decoder: Any, step: int) -> int:
        return len(decoder.get_frames_at(sorted(rng.sample(range(len(decoder)), 32))).data)

    timed("sequential", sequential)
    timed("random_single", random_single)
    timed("random_batch32", random_batch)
    return result


def av1_stages(path: Path, *, backend: CudaBackend) -> dict[str, Any]:
    """AV1 on CUDA, stage by stage: where (if anywhere) it raises, with the text verbatim."""
    stages: dict[str, Any] = {"file": str(path)}
    decoder = None
    for stage in ("open", "first_frame", "frames_0_to_7", "random_frame"):
        try:
            if stage == "open":
                decoder = open_decoder(path, device="cuda", backend=backend)
                stages["open"] = "ok"
                continue
            assert decoder is not None
            if stage == "first_frame":
                frame = decoder.get_frame_at(0).data
            elif stage == "frames_0_to_7":
                frame = decoder.get_frames_at(list(range(8))).data
            else:
                frame = decoder.get_frame_at(len(decoder) // 2 + 1).data
            sync("cuda")
            stages[stage] = f"ok {list(frame.shape)} on {frame.device}"
        # each stage's failure is the finding; the stages after it still say whether the decoder recovers
        except Exception as exc:  # noqa: BLE001
            stages[stage] = f"{type(exc).__name__}: {exc}"
            if decoder is None:
                break
    if decoder is not None:
        stages["cpu_fallback"] = str(decoder.cpu_fallback)
    return stages


def robostream_av1_cuda(path: Path) -> dict[str, Any]:
    """The same through robostream's decoder class: which error type and message our loader would see."""
    from robostream.video.decoder import TorchCodecVideoDecoder

    stages: dict[str, Any] = {}
    try:
        decoder = TorchCodecVideoDecoder(str(path), device="cuda")
        stages["open"] = "ok"
        frames, pts = decoder.get_frames_by_index([0, 1, 2])
        sync("cuda")
        stages["get_frames_by_index"] = f"ok {list(frames.shape)} on {frames.device}"
    # the type and text robostream raises are what issue 37's probe must catch
    except Exception as exc:  # noqa: BLE001
        stages["error"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    return stages


def bench(root: Path, *, args: list[str], timeout_s: float) -> dict[str, Any]:
    """`python -m robostream.bench` on `root` with `args`: frames/s, data wait and first batch of each run."""
    from robostream.bench.report import load_results

    with tempfile.TemporaryDirectory() as folder:
        command = [
            sys.executable,
            "-m",
            "robostream.bench",
            str(root),
            "--split_samples",
            "0",
            "--warmup_batches",
            "2",
            "--num_batches",
            "100000",
            "--duration_s",
            str(BENCH_DURATION_S),
            "--out",
            folder,
            *args,
        ]
        print("$ " + " ".join(command), flush=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        print(done.stdout[-4000:], flush=True)
        runs = {}
        for result in load_results(Path(folder))[0]:
            config, metrics = result["config"], result["metrics"]
            name = f"{config['loader']}/{config['mode']}/w{config['num_workers']}/{config['video_decode_device']}"
            runs[name] = {
                "camera_decoders": result.get("info", {}).get("camera_decoders"),
                "frames_decoded_gpu": metrics.get("frames_decoded_gpu"),
                "frames_decoded_cpu_fallback": metrics.get("frames_decoded_cpu_fallback"),
                "frames_per_s": round(metrics["frames_per_s"], 1),
                "samples_per_s": round(metrics["samples_per_s"], 1),
                "data_wait_frac": round(metrics["data_wait_frac"], 3),
                "first_batch_s": round(metrics["first_batch_latency_s"], 2),
                "batches": metrics["batches"],
                "peak_rss_mib": round(metrics["peak_rss_mib"]),
            }
    summary: dict[str, Any] = {"command": " ".join(command[1:]), "exit": done.returncode, "runs": runs}
    if done.returncode != 0:
        summary["stderr_tail"] = done.stderr[-3000:]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=Path(".devbundle"))
    parser.add_argument("--data", type=Path, help="the datasets' folder (h264/, av1/, hevc/; default BUNDLE/data)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget_s", type=float, default=330.0, help="seconds for these steps; later ones are skipped")
    parser.add_argument("--group", choices=GROUPS, required=True, help="which steps (one process per group)")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    record = Recorder(out=options.out, budget_s=options.budget_s)
    data = options.data or options.bundle / "data"
    GROUPS[options.group](record, data / "h264", data / "av1")


def camera_routing(root: Path) -> dict[str, Any]:
    """robostream's per-camera routing on this GPU: which decoder serves each camera, where the frames come out, how
    far they are from the CPU decoder's, and what gpu_fallback="error" says (issue 37's fallback, for real)."""
    from robostream import DecodeOptions, LeRobotDataset

    cpu = LeRobotDataset(root=root, return_uint8=True)
    positions = random.Random(0).sample(range(len(cpu)), 12)
    out: dict[str, Any] = {}
    for fallback in ("cpu", "error"):
        gpu = LeRobotDataset(root=root, return_uint8=True, decoding=DecodeOptions(device="cuda", gpu_fallback=fallback))
        try:
            started = time.perf_counter()
            where = gpu.camera_decoders()
            opened = time.perf_counter() - started
            devices, worst = set(), 0
            for position in positions:
                mine, theirs = gpu[position], cpu[position]
                for key in cpu.meta.video_keys:
                    devices.add(f"{key}: {mine[key].device}")
                    worst = max(worst, int((mine[key].cpu().int() - theirs[key].int()).abs().max()))
            counts = gpu.frame_counts()
            out[fallback] = {
                "camera_decoders": where,
                "open_s": round(opened, 2),
                "frame_devices": sorted(devices),
                "max_abs_diff_vs_cpu": worst,
                "frames_decoded_gpu": counts["frames_decoded_gpu"],
                "frames_decoded_cpu_fallback": counts["frames_decoded_cpu_fallback"],
            }
        # gpu_fallback="error" on a codec the GPU lacks must refuse: its text is the finding
        except Exception as exc:  # noqa: BLE001
            out[fallback] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def gpu_tests() -> dict[str, Any]:
    """The GPU tests of the suite (tests/video/test_gpu_routing.py), which skip where there is no GPU."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=-ra",
        "tests/video/test_gpu_routing.py",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    return {"command": " ".join(command[1:]), "exit": done.returncode, "tail": (done.stdout + done.stderr)[-2500:]}


def routing_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("routing_h264", lambda: camera_routing(h264_root), needs_s=20)
    record.guarded("routing_av1", lambda: camera_routing(av1_root), needs_s=20)


def gpu_test_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("gpu_tests", gpu_tests, needs_s=60)


def codec_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    """Raw decoding of the HEVC transcode (data/hevc) and the AV1 source on the CPU and on NVDEC (the H.264
    transcode is the `raw` group's): the bundle's three datasets are one AV1 dataset and its `robostream transcode`
    outputs (BENCHMARKS.md "GPU decoding per camera")."""
    for name, root in (("hevc", h264_root.parent / "hevc"), ("av1", av1_root)):
        files = videos(root)
        record.guarded(f"raw_{name}_cpu", lambda f=files: raw_decode(f, device="cpu", backend="ffmpeg"), needs_s=12)
        record.guarded(f"raw_{name}_cuda", lambda f=files: raw_decode(f, device="cuda", backend="beta"), needs_s=12)


def environment_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("environment", environment)


def pyav_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("pyav", pyav_environment)


def cuda_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    h264 = videos(h264_root)
    record.guarded("cuda_first_frame_ffmpeg", lambda: first_frame(h264[0], device="cuda", backend="ffmpeg"))
    record.guarded("cuda_first_frame_beta", lambda: first_frame(h264[0], device="cuda", backend="beta"))


# AV1 on CUDA in three processes: on the H100 (2026-11-26) FFmpeg's CUDA path segfaulted at the first frame, which
# took the beta backend's and robostream's checks down with it when they shared the process
def av1_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    av1 = videos(av1_root)
    record.guarded("av1_cpu", lambda: first_frame(av1[0], device="cpu", backend="ffmpeg"))
    record.guarded("av1_cuda_beta", lambda: av1_stages(av1[0], backend="beta"))


def av1_ffmpeg_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("av1_cuda_ffmpeg", lambda: av1_stages(videos(av1_root)[0], backend="ffmpeg"))


def av1_robostream_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    record.guarded("av1_cuda_robostream", lambda: robostream_av1_cuda(videos(av1_root)[0]))


def raw_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    h264 = videos(h264_root)
    record.guarded("raw_h264_cpu", lambda: raw_decode(h264, device="cpu", backend="ffmpeg"), needs_s=15)
    record.guarded("raw_h264_cuda_beta", lambda: raw_decode(h264, device="cuda", backend="beta"), needs_s=15)


def loader_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    # most wanted first: the decode device through our loaders; the CPU runs at 1 and 2 workers come after scaling
    for device, workers in LOADER_RUNS:
        loader_run(record, h264_root, device=device, workers=int(workers))


def scaling_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    for workers in SCALING_WORKERS:
        scaling_run(record, h264_root, workers=workers)


def scaling_run(record: Recorder, root: Path, *, workers: int) -> None:
    """CPU decoding through the streaming loader, `single` windows, on `workers` DataLoader workers."""
    args = ["--mode", "single", "--loader", "stream", "--video_decode_device", "cpu", "--num_workers", str(workers)]
    record.guarded(f"scaling_cpu_w{workers}", lambda: bench(root, args=args, timeout_s=60), needs_s=25)


def more_loader_steps(record: Recorder, h264_root: Path, av1_root: Path) -> None:
    for workers in (1, 2):
        loader_run(record, h264_root, device="cpu", workers=workers)


def loader_run(record: Recorder, root: Path, *, device: str, workers: int) -> None:
    """Both loaders, single and sarm windows, decoding on `device` with `workers` DataLoader workers."""
    args = [
        "--mode",
        "single",
        "sarm",
        "--loader",
        "stream",
        "map",
        "--video_decode_device",
        device,
        "--num_workers",
        str(workers),
    ]
    # four runs per call: over 60 s on the H100 machine (2026-11-26), and the FFmpeg CUDA backend's random access
    # crawls (17.5 frames/s), so cuda runs may still end at the limit
    record.guarded(f"loader_{device}_w{workers}", lambda: bench(root, args=args, timeout_s=150), needs_s=60)


GROUPS: dict[str, Callable[[Recorder, Path, Path], None]] = {
    "environment": environment_steps,
    "cuda": cuda_steps,
    "av1": av1_steps,
    "av1_ffmpeg": av1_ffmpeg_steps,
    "av1_robostream": av1_robostream_steps,
    "raw": raw_steps,
    "loaders": loader_steps,
    "scaling": scaling_steps,
    "pyav": pyav_steps,
    "more_loaders": more_loader_steps,
    "routing": routing_steps,
    "gpu_tests": gpu_test_steps,
    "codecs": codec_steps,
}

if __name__ == "__main__":
    main()
