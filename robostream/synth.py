"""Deterministic sample-dataset generator: the embedded default dataset of the demo, the benchmark and the tests.

Frames exercise the codec (a moving disc, a drifting gradient and per-camera noise, so cameras compress to
different sizes and their files roll over at different episodes) and carry a machine-readable marker: three rows
of 16 black/white blocks at the top encode (episode_index, frame_index, camera number), so a test can prove which
frame a loader returned after lossy compression. Episodes are rendered and encoded in parallel processes and
appended by the v3.0 writer.

Encoding runs in worker processes started by the forkserver method, never forked from this process: a fork copies
whatever locks this process's threads (Arrow's, an encoder's, a test runner's) held at that moment, and an SVT-AV1
encoder in a forked worker once waited forever on one. Each camera of each episode is one task, bounded in time
(`encode_bound_s`): a stuck encoder becomes an EncodeError naming the episode and camera, its workers killed.

Depth cameras (`depth`, after the RGB ones) are written as lerobot 0.6.1 writes them (writer/depth.py): float
depths in metres (`render_depth`: a tilted plane, a near bowl-shaped object, zeros and too-far values in the
bottom corners, and the same marker with bits as depths), 12-bit codes in lossless HEVC.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from robostream.errors import EncodeError
from robostream.format.language import LANGUAGE_DTYPE, LANGUAGE_EVENTS, LANGUAGE_PERSISTENT, SAY_TOOL_SCHEMA
from robostream.format.stats import frame_stats, image_stats
from robostream.format.v21 import V21
from robostream.video.encode import encode_depth_video, encode_video
from robostream.writer.depth import (
    DEPTH_BLOCKS,
    DEPTH_CRF,
    DEPTH_GOP,
    DepthBlock,
    depth_codes,
    depth_feature,
)
from robostream.writer.v21 import V21Writer
from robostream.writer.v30 import DatasetWriter

MARKER_BITS = 16
# Depths (metres) of the depth cameras' marker bits 0 and 1, and of their out-of-range corners: a sensor's zeros
# (no reading; below depth_min, code 0) and a reading beyond depth_max (code 4095). Both clamp when quantised.
DEPTH_MARKER_M = (1.0, 6.0)
DEPTH_DROPOUT_M = 0.0
DEPTH_BEYOND_M = 12.0
ENCODE_ATTEMPTS = 2  # per camera of an episode (see _encode_camera)
# How long one camera of one episode may take to render and encode before its encoder counts as stuck: a base for
# process start-up and a loaded machine, plus time per megapixel of video (SVT-AV1 and x265 encode a megapixel in
# well under 0.1 s on one core; 20x that covers a 2-core machine running other work).
ENCODE_BOUND_BASE_S = 120.0
ENCODE_BOUND_S_PER_MEGAPIXEL = 2.0
TASKS = (
    "pick up the red cube and place it in the bin",
    "open the top drawer",
    "push the blue block to the goal",
    "fold the towel in half",
)


@dataclass(frozen=True)
class SynthConfig:
    episodes: int = 40
    cameras: int = 3
    height: int = 256
    width: int = 256
    fps: int = 20
    episode_length: int = 200
    state_dim: int = 14
    codec: str = "av1"
    gop: int = 2
    crf: int = 30
    av1_preset: int = 12  # SVT-AV1's fastest; other codecs use their encoder's default speed
    data_file_mb: float = 100
    video_file_mb: float = 200
    seed: int = 0
    codebase_version: str = "v3.0"  # or "v2.1": one file per episode (the converter's input)
    content: str = "noisy"  # "noisy": per-camera sensor noise (expensive to decode); "smooth": none, like the
    # low-noise scenes lerobot's recorder writes (cheap to decode: where per-sample overhead shows most)
    language: bool = False  # add lerobot-annotate's language columns and info.json "tools" (v3.0 only)
    depth: int = 0  # depth cameras, after the RGB ones: lerobot 0.6.1's depth encoding (writer/depth.py)
    reward: bool = False  # a `next.reward` column (float32): 1.0 in each episode's last quarter, 0.0 before (the
    # success labels lerobot's reward classifier learns from)
    depth_block: DepthBlock = "info"  # v2.1 only: which key holds a depth camera's legacy block ("video_info":
    # the older spelling, in place of `info`)


def camera_key(camera: int) -> str:
    return f"observation.images.cam{camera}"


def depth_key(camera: int) -> str:
    return f"observation.images.depth{camera}"


def marker_geometry(height: int, width: int) -> tuple[int, int]:
    """(block height, block width) of the marker grid; blocks span the full width."""
    if width < MARKER_BITS * 4 or height < 48:
        raise ValueError(f"frames of {height}x{width} are too small for the frame marker (need >= 48x64)")
    return max(4, height // 32), width // MARKER_BITS


def draw_marker(frame: np.ndarray, values: tuple[int, ...]) -> None:
    """Paint each value as a row of 16 black/white blocks (most significant bit first) at the top of (H, W, 3)."""
    bh, bw = marker_geometry(*frame.shape[:2])
    for row, value in enumerate(values):
        bits = (int(value) >> np.arange(MARKER_BITS - 1, -1, -1)) & 1
        band = np.repeat(bits.astype(np.uint8) * 255, bw)
        frame[row * bh : (row + 1) * bh, : len(band), :] = band[None, :, None]


def read_marker(frame: np.ndarray, rows: int = 3) -> tuple[int, ...]:
    """Decode the marker of a uint8 frame, (H, W, 3) or (3, H, W), as drawn by `draw_marker`."""
    frame = np.asarray(frame)
    if frame.ndim == 3 and frame.shape[0] == 3 and frame.shape[-1] != 3:
        frame = frame.transpose(1, 2, 0)
    bh, bw = marker_geometry(*frame.shape[:2])
    luma = frame[..., :3].astype(np.float32).mean(axis=-1)
    values = []
    for row in range(rows):
        cells = luma[row * bh + bh // 4 : (row + 1) * bh - bh // 4, : MARKER_BITS * bw]
        cells = cells.reshape(cells.shape[0], MARKER_BITS, bw)[:, :, bw // 4 : bw - bw // 4]
        bits = cells.mean(axis=(0, 2)) > 127.5
        values.append(int("".join("1" if b else "0" for b in bits), 2))
    return tuple(values)


def draw_depth_marker(depth: np.ndarray, values: tuple[int, ...]) -> None:
    """`draw_marker` on a depth frame (H, W) in metres: bit 0 is DEPTH_MARKER_M[0], bit 1 DEPTH_MARKER_M[1]."""
    bh, bw = marker_geometry(*depth.shape)
    for row, value in enumerate(values):
        bits = (int(value) >> np.arange(MARKER_BITS - 1, -1, -1)) & 1
        depth[row * bh : (row + 1) * bh, : MARKER_BITS * bw] = np.repeat(np.take(DEPTH_MARKER_M, bits), bw)[None, :]


def read_depth_marker(depth_m: np.ndarray, rows: int = 3) -> tuple[int, ...]:
    """Decode the marker of a depth frame in metres ((H, W), (H, W, 1) or (1, H, W)), as `draw_depth_marker`
    drew it; depths decoded from the 12-bit codes (any unit converted to metres) read back exactly."""
    depth = np.asarray(depth_m, dtype=np.float64).squeeze()
    bh, bw = marker_geometry(*depth.shape)
    threshold = sum(DEPTH_MARKER_M) / 2
    values = []
    for row in range(rows):
        cells = depth[row * bh + bh // 4 : (row + 1) * bh - bh // 4, : MARKER_BITS * bw]
        cells = cells.reshape(cells.shape[0], MARKER_BITS, bw)[:, :, bw // 4 : bw - bw // 4]
        bits = cells.mean(axis=(0, 2)) > threshold
        values.append(int("".join("1" if b else "0" for b in bits), 2))
    return tuple(values)


def render_depth(episode: int, camera: int, length: int, height: int, width: int) -> np.ndarray:
    """float32 (T, H, W, 1) depths in metres of depth camera `camera` of one episode (no randomness):

    a tilted plane 0.8 + 5.0 x/(W-1) + 1.5 y/(H-1) + 0.5 sin(0.1 t + 0.7 episode + 1.3 camera) (0.3..7.8 m); a
    near bowl 0.25 + 0.15 r² (0.25..0.40 m) where r² = ((y-cy)² + (x-cx)²) / (0.15 min(H, W))² < 1, centred at
    cy = H (0.55 + 0.25 sin(0.07 t + episode)), cx = W (0.5 + 0.3 cos(0.05 t + 0.5 episode + camera)); the bottom
    H//8 rows hold DEPTH_DROPOUT_M in the first W//8 columns and DEPTH_BEYOND_M in the last W//8; on top, the
    marker (episode, t, camera) (`draw_depth_marker`). Pixel coordinates x, y, frame t; computed in float64.
    """
    y = np.arange(height, dtype=np.float64)[:, None]
    x = np.arange(width, dtype=np.float64)[None, :]
    radius2 = (0.15 * min(height, width)) ** 2
    band = height - height // 8
    frames = np.empty((length, height, width, 1), dtype=np.float32)
    for t in range(length):
        depth = (
            0.8 + 5.0 * x / (width - 1) + 1.5 * y / (height - 1) + 0.5 * np.sin(0.1 * t + 0.7 * episode + 1.3 * camera)
        )
        cy = height * (0.55 + 0.25 * np.sin(0.07 * t + episode))
        cx = width * (0.5 + 0.3 * np.cos(0.05 * t + 0.5 * episode + camera))
        r2 = ((y - cy) ** 2 + (x - cx) ** 2) / radius2
        depth = np.where(r2 < 1, 0.25 + 0.15 * r2, depth)
        depth[band:, : width // 8] = DEPTH_DROPOUT_M
        depth[band:, width - width // 8 :] = DEPTH_BEYOND_M
        draw_depth_marker(depth, (episode, t, camera))
        frames[t, :, :, 0] = depth
    return frames


CONTENTS = ("noisy", "smooth")


def render_camera(
    episode: int, camera: int, length: int, height: int, width: int, seed: int, content: str = "noisy"
) -> np.ndarray:
    """uint8 (T, H, W, 3) frames of one camera of one episode; `content` "smooth" leaves the sensor noise out."""
    rng = np.random.default_rng([seed, episode, camera])
    t = np.arange(length, dtype=np.float32)[:, None, None]
    y = np.arange(height, dtype=np.float32)[None, :, None]
    x = np.arange(width, dtype=np.float32)[None, None, :]
    phase = rng.uniform(0, 2 * np.pi, size=3).astype(np.float32)
    gradient = 90 + 60 * np.sin(2 * np.pi * (x / width + y / height) + 0.05 * t + phase[0])
    cy = height * (0.5 + 0.3 * np.sin(0.07 * t + phase[1]))
    cx = width * (0.5 + 0.3 * np.cos(0.05 * t + phase[2]))
    disc = ((y - cy) ** 2 + (x - cx) ** 2) < (0.12 * min(height, width)) ** 2
    frames = np.empty((length, height, width, 3), dtype=np.uint8)
    tint = np.array([1.0, 0.8 + 0.1 * camera, 0.6], dtype=np.float32)
    noise_amplitude = 3 + 5 * camera if content == "noisy" else 0
    for i in range(length):
        base = np.where(disc[i], 220.0, gradient[i])[..., None] * tint
        if noise_amplitude:
            base = base + rng.normal(0, noise_amplitude, size=(height, width, 1)).astype(np.float32)
        frames[i] = np.clip(base, 0, 255).astype(np.uint8)
        draw_marker(frames[i], (episode, i, camera))
    return frames


def episode_lengths(config: SynthConfig) -> list[int]:
    rng = np.random.default_rng([config.seed, 1_000_003])
    low, high = int(config.episode_length * 0.75), int(config.episode_length * 1.25)
    return [int(n) for n in rng.integers(max(low, 2), max(high, 3) + 1, size=config.episodes)]


def episode_tasks(episode: int, length: int) -> list[str]:
    """One task per frame; every fifth episode switches task half-way, so per-frame tasks are exercised."""
    first = TASKS[episode % len(TASKS)]
    if episode % 5 == 4:
        return [first] * (length // 2) + [TASKS[(episode + 1) % len(TASKS)]] * (length - length // 2)
    return [first] * length


def episode_table(episode: int, length: int, state_dim: int, seed: int) -> dict[str, np.ndarray]:
    """Smooth joint trajectories; the action is the next state."""
    rng = np.random.default_rng([seed, episode, 99])
    t = np.arange(length + 1, dtype=np.float64)[:, None]
    freq = rng.uniform(0.02, 0.1, size=state_dim)
    phase = rng.uniform(0, 2 * np.pi, size=state_dim)
    trajectory = np.sin(freq * t + phase) + 0.01 * episode
    return {"observation.state": trajectory[:-1].astype(np.float32), "action": trajectory[1:].astype(np.float32)}


def episode_reward(length: int) -> np.ndarray:
    """`next.reward` of an episode's frames: 0.0, then 1.0 (success) for its last quarter (at least the last frame)."""
    reward = np.zeros(length, dtype=np.float32)
    reward[length - max(1, length // 4) :] = 1.0
    return reward


def episode_language(episode: int, length: int, fps: int, camera: str | None) -> dict[str, list[list[dict]]]:
    """The two language columns of an episode as lerobot-annotate's writer lays them out: the persistent rows
    (a plan and two subtasks, sorted by timestamp, style, role) on every frame; events on the frame they fire at
    (an interjection with the spoken reply, a tool call to `say`, at a third of the episode; a question and answer
    about `camera` at two thirds, none without a camera), sorted by style, role, camera; [] on other frames."""
    times = (np.arange(length) / fps).astype(np.float32).tolist()
    half, third, two_thirds = length // 2, length // 3, 2 * length // 3
    task = TASKS[episode % len(TASKS)]
    persistent = [
        {"role": "assistant", "content": f"1. reach 2. {task}", "style": "plan", "timestamp": times[0]},
        {"role": "assistant", "content": "reach for the object", "style": "subtask", "timestamp": times[0]},
        {"role": "assistant", "content": task, "style": "subtask", "timestamp": times[half]},
    ]
    events: list[list[dict]] = [[] for _ in range(length)]
    speech = {
        "type": "function",
        "function": {"name": "say", "arguments": {"text": f"slowing down, episode {episode}"}},
    }
    events[third] = [
        {"role": "assistant", "content": None, "style": None, "tool_calls": [speech]},
        {"role": "user", "content": "a bit slower please", "style": "interjection"},
    ]
    if camera is not None and two_thirds != third:
        events[two_thirds] = [
            {"role": "assistant", "content": f'{{"episode": {episode}}}', "style": "vqa", "camera": camera},
            {"role": "user", "content": "which episode is this?", "style": "vqa", "camera": camera},
        ]
    return {LANGUAGE_PERSISTENT: [persistent] * length, LANGUAGE_EVENTS: events}


def encode_bound_s(length: int, height: int, width: int) -> float:
    """Seconds one camera of an episode of `length` frames may take to render and encode (see ENCODE_BOUND_*)."""
    return ENCODE_BOUND_BASE_S + ENCODE_BOUND_S_PER_MEGAPIXEL * length * height * width / 1e6


def _encode_camera(
    config_dict: dict, episode: int, length: int, camera: int, depth: bool, tmp: str
) -> tuple[str, dict]:
    """Worker: render and encode one camera (RGB, or depth if `depth`) of one episode; returns (mp4 path, stats of
    its frames)."""
    config = SynthConfig(**config_dict)
    key = depth_key(camera) if depth else camera_key(camera)
    path = Path(tmp) / f"ep{episode:06d}-{key}.mp4"
    stride = max(1, length // 32)  # stats from a sample of the frames
    if depth:
        depths = render_depth(episode, camera, length, config.height, config.width)
        codes = depth_codes(depths, where=f"episode {episode} {key}", shape=(config.height, config.width))
        encode_depth_video(codes, path, fps=config.fps, gop=DEPTH_GOP, crf=DEPTH_CRF)
        stats = frame_stats(depths[::stride, ::4, ::4])
    else:
        frames = render_camera(episode, camera, length, config.height, config.width, config.seed, config.content)
        for attempt in range(ENCODE_ATTEMPTS):
            try:
                encode_video(
                    frames,
                    path,
                    config.fps,
                    config.codec,
                    config.gop,
                    config.crf,
                    preset=config.av1_preset if config.codec == "av1" else None,
                )
                break
            except av.error.FFmpegError:
                # Once, in a CI run on a loaded machine, the muxer refused an SVT-AV1 packet (EINVAL); 15 clean
                # repeats did not reproduce it. The frames are deterministic, so a second encode writes the same file.
                if attempt == ENCODE_ATTEMPTS - 1:
                    raise
        stats = image_stats(frames[::stride, ::4, ::4])
    stats["count"] = np.array([length], dtype=np.int64)
    return str(path), stats


def _encoded_episodes(
    pool: ProcessPoolExecutor,
    config: SynthConfig,
    lengths: list[int],
    tmp: str,
    encode_timeout_s: float | None,
) -> Iterator[dict[str, tuple[str, dict]]]:
    """Per episode in order, per camera (mp4 path, stats), each camera's task bounded in time (see the module
    docstring). Results are taken in submission order, so a task waited for is running (its predecessors are done):
    the bound is on its own work."""
    cameras = [(camera_key(c), c, False) for c in range(config.cameras)]
    cameras += [(depth_key(c), c, True) for c in range(config.depth)]
    config_dict = asdict(config)
    tasks: list[dict[str, Future]] = [
        {key: pool.submit(_encode_camera, config_dict, episode, length, c, depth, tmp) for key, c, depth in cameras}
        for episode, length in enumerate(lengths)
    ]
    for episode, futures in enumerate(tasks):
        bound = encode_timeout_s or encode_bound_s(lengths[episode], config.height, config.width)
        encoded = {}
        for key, future in futures.items():
            try:
                encoded[key] = future.result(timeout=bound)
            except FutureTimeout:
                stacks = _worker_stacks(pool, tmp)
                _kill_workers(pool)
                raise EncodeError(
                    f"synth: episode {episode} camera {key}: not encoded after {bound:.0f} s (a stuck encoder); its "
                    "worker processes were killed. Run it again (the output is deterministic). Where the workers "
                    f"were:\n{stacks}"
                ) from None
            except BrokenProcessPool as exc:
                raise EncodeError(
                    f"synth: the encoder processes died while episode {episode} camera {key} was encoded ({exc}). "
                    "They start by the forkserver method, which imports the main module: if a script calls "
                    "generate(), put the call under `if __name__ == '__main__':` (and save a script read from "
                    "standard input to a file)"
                ) from exc
        yield encoded


_stack_file = None  # a worker's open file for faulthandler (kept referenced: faulthandler writes to its descriptor)


def _dump_stacks_on_sigusr1(tmp: str) -> None:
    """Worker initializer: SIGUSR1 writes every thread's Python stack to `tmp`/stacks-PID.txt (from the signal
    handler, so also while the encoder holds the thread in C)."""
    global _stack_file
    _stack_file = open(Path(tmp) / f"stacks-{os.getpid()}.txt", "w")  # noqa: SIM115 (open for the worker's life)
    faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)


def _worker_stacks(pool: ProcessPoolExecutor, tmp: str) -> str:
    """What each of the pool's workers was doing: its Python stacks (faulthandler, on SIGUSR1) and, per thread,
    the kernel function it sleeps in (/proc: threads all in futex waits mean a deadlock, running ones a slow
    encode). For the EncodeError of a stuck encoder, so a hang seen once can be diagnosed."""
    pids = [process.pid for process in (pool._processes or {}).values() if process.pid is not None]
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    time.sleep(1.0)
    reports = []
    for pid in pids:
        stacks = Path(tmp, f"stacks-{pid}.txt")
        python = stacks.read_text() if stacks.exists() else "(no stacks written)\n"
        try:
            waits = [Path(task, "wchan").read_text() for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError as exc:  # not Linux, or the worker is gone
            waits = [f"({exc})"]
        waits = ["running" if wait in ("", "0") else wait for wait in waits]  # wchan is 0 on a CPU
        states = ", ".join(f"{waits.count(w)} x {w}" for w in sorted(set(waits)))
        reports.append(f"worker {pid}: threads in the kernel: {states}\n{python}")
    return "\n".join(reports)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL the pool's workers (a stuck one ignores everything else) and drop its queued tasks.
    ProcessPoolExecutor offers no public way to stop a running task before Python 3.14 (`kill_workers`)."""
    for process in list((pool._processes or {}).values()):
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _check_depth_config(config: SynthConfig) -> None:
    if config.depth < 0:
        raise ValueError(f"depth={config.depth}: the number of depth cameras cannot be negative")
    if config.depth_block not in DEPTH_BLOCKS:
        raise ValueError(f"depth_block={config.depth_block!r}: choose one of {DEPTH_BLOCKS}")
    if config.depth_block != "info" and config.codebase_version != V21:
        raise ValueError(f"depth_block={config.depth_block!r} is a v2.x spelling: use codebase_version 'v2.1'")


def generate(
    root: str | Path,
    config: SynthConfig = SynthConfig(),
    overwrite: bool = False,
    jobs: int | None = None,
    *,
    encode_timeout_s: float | None = None,
) -> Path:
    """Write the synthetic dataset to `root` and return it. Same config and seed give the same dataset.

    Args:
        root: the dataset folder to write.
        config: what to generate.
        overwrite: replace an existing dataset at `root`.
        jobs: encoder processes (default: one per CPU).
        encode_timeout_s: how long one camera of one episode may take before its encoder counts as stuck (an
            EncodeError naming them); default `encode_bound_s` of the episode's length and frame size.
    """
    marker_geometry(config.height, config.width)
    if config.content not in CONTENTS:
        raise ValueError(f"content={config.content!r}: choose one of {CONTENTS}")
    _check_depth_config(config)
    if config.episodes >= 2**MARKER_BITS or config.episode_length * 1.25 >= 2**MARKER_BITS:
        raise ValueError("episodes and episode_length must stay below 65536 for the frame marker")
    features: dict[str, dict[str, Any]] = {
        "observation.state": {
            "dtype": "float32",
            "shape": [config.state_dim],
            "names": [f"joint_{i}" for i in range(config.state_dim)],
        },
        "action": {
            "dtype": "float32",
            "shape": [config.state_dim],
            "names": [f"joint_{i}" for i in range(config.state_dim)],
        },
    }
    if config.reward:
        features["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    for camera in range(config.cameras):
        features[camera_key(camera)] = {
            "dtype": "video",
            "shape": [config.height, config.width, 3],
            "names": ["height", "width", "channels"],
        }
    for camera in range(config.depth):
        features[depth_key(camera)] = depth_feature(height=config.height, width=config.width)
    if config.language:
        if config.codebase_version != "v3.0":
            raise ValueError("language columns are a v3.0 feature (lerobot-annotate): use codebase_version 'v3.0'")
        features.update(
            {
                key: {"dtype": LANGUAGE_DTYPE, "shape": [1], "names": None}
                for key in (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS)
            }
        )
    lengths = episode_lengths(config)
    jobs = jobs or os.cpu_count() or 1
    root = Path(root)
    writer: V21Writer | DatasetWriter
    if config.codebase_version == V21:
        writer = V21Writer(
            root,
            config.fps,
            features,
            robot_type="synthetic_bimanual",
            codec=config.codec,
            gop=config.gop,
            crf=config.crf,
            depth_block=config.depth_block,
            overwrite=overwrite,
        )
    elif config.codebase_version == "v3.0":
        writer = DatasetWriter(
            root,
            config.fps,
            features,
            robot_type="synthetic_bimanual",
            codec=config.codec,
            gop=config.gop,
            crf=config.crf,
            data_files_size_in_mb=config.data_file_mb,
            video_files_size_in_mb=config.video_file_mb,
            overwrite=overwrite,
            tools=[SAY_TOOL_SCHEMA] if config.language else None,
        )
    else:
        raise ValueError(f"codebase_version {config.codebase_version!r}: choose 'v3.0' or 'v2.1'")
    tmp = tempfile.mkdtemp(prefix="robostream-synth-")
    try:
        forkserver = multiprocessing.get_context("forkserver")
        # The server (one per process, started at its first use) imports this module once, so each worker is a
        # cheap fork of it rather than a fresh interpreter importing PyAV, NumPy and Arrow (seconds on a busy
        # machine). "__main__" is the default list's entry; a server already running keeps its own list.
        forkserver.set_forkserver_preload(["__main__", __name__])
        encoders = ProcessPoolExecutor(
            max_workers=jobs, mp_context=forkserver, initializer=_dump_stacks_on_sigusr1, initargs=(tmp,)
        )
        with writer, encoders as pool:
            encoded_episodes: Iterable[dict[str, tuple[str, dict]]]
            encoded_episodes = _encoded_episodes(pool, config, lengths, tmp, encode_timeout_s)
            if sys.stderr.isatty():  # a live bar on a terminal; logs (CI) get nothing extra
                from rich.console import Console
                from rich.progress import track

                encoded_episodes = track(
                    encoded_episodes,
                    total=len(lengths),
                    description="synth: episodes",
                    console=Console(stderr=True),
                    transient=True,
                )
            for episode, encoded in enumerate(encoded_episodes):
                frames: dict[str, Any] = episode_table(episode, lengths[episode], config.state_dim, config.seed)
                if config.reward:
                    frames["next.reward"] = episode_reward(lengths[episode])
                if config.language:
                    frames.update(
                        episode_language(
                            episode, lengths[episode], config.fps, camera_key(0) if config.cameras else None
                        )
                    )
                writer.add_episode(
                    frames,
                    task=episode_tasks(episode, lengths[episode]),
                    video_files={k: path for k, (path, _) in encoded.items()},
                    video_stats={k: stats for k, (_, stats) in encoded.items()},
                )
                for path, _ in encoded.values():
                    os.unlink(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
