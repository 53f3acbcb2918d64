"""Decoded frames laid out as the samples hold them: contiguous (C, H, W).

Decoders produce packed RGB (H, W, C) frames and hand them out as (C, H, W) views. Changing the layout is a
de-interleave of every pixel's channels; torch's strided copy does it a byte at a time (~70 us for a 256x256 frame
out of cache), OpenCV's `split` with SIMD in ~16 us, so CPU frames go through OpenCV. Frames up to 128 KiB are
split several at a time (up to SPLIT_BYTES) into a scratch buffer and copied out: a call per frame cost ~6 us of
call overhead at 128x128, more than the frame's own de-interleave; from ~150 KiB (224x224) the extra copy costs
what the calls saved (BENCHMARKS.md, thirteenth session).
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import torch

# Output of one OpenCV split of several frames: small enough to stay in a core's L2 cache until copied out.
SPLIT_BYTES = 1 << 20
SPLIT_RUN_MIN = 8  # frames split at once, at least: larger frames are split one by one
_SCRATCH = threading.local()  # per thread (cameras decode in parallel): a reused SPLIT_BYTES buffer


def gather_chw(frames: torch.Tensor, picks: np.ndarray) -> torch.Tensor:
    """frames[picks] as one new contiguous (n, C, H, W) tensor; frames is (N, C, H, W), usually a view of packed
    (N, H, W, C) decoder output."""
    out = torch.empty((len(picks), *frames.shape[1:]), dtype=frames.dtype, device=frames.device)
    copy_picks(list(out), frames, picks)
    return out


class FramePool:
    """Frame buffers of one process for reuse: the streaming batch path hands back the frames it has copied into a
    batch, and the next decoded frames are laid out in them. A fresh 192 KiB block per frame costs page faults on
    first touch (glibc maps blocks that size anew, or trims and regrows its heap), about as much as the layout copy
    itself; reused buffers are warm and keep the heap from fragmenting."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes  # buffers given back beyond this are left to the allocator
        self._free: dict[tuple[tuple[int, ...], torch.dtype], list[torch.Tensor]] = {}
        self._bytes = 0
        self.reused = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, count: int) -> list[torch.Tensor]:
        """`count` buffers of one shape: reused ones first, then fresh."""
        free = self._free.get((tuple(shape), dtype), [])
        reused = min(count, len(free))
        out: list[torch.Tensor] = free[len(free) - reused :]
        if reused:
            del free[len(free) - reused :]
            self.reused += reused
            self._bytes -= reused * out[0].untyped_storage().nbytes()
        out.extend(torch.empty(shape, dtype=dtype) for _ in range(count - reused))
        return out

    def give(self, frames: list[torch.Tensor]) -> None:
        """Take back frames nobody reads any more; only whole CPU tensors (not views of a larger one) are kept."""
        for frame in frames:
            size = frame.untyped_storage().nbytes()
            if self._bytes + size > self.max_bytes:
                return
            if frame.is_cpu and size == frame.nbytes and frame.storage_offset() == 0 and frame.is_contiguous():
                self._free.setdefault((tuple(frame.shape), frame.dtype), []).append(frame)
                self._bytes += size


def frames_chw(frames: torch.Tensor, picks: np.ndarray, pool: FramePool | None = None) -> list[torch.Tensor]:
    """frames[picks] as separate contiguous (C, H, W) tensors (from `pool` where given: CPU frames only). Frames
    held for a while are allocated one by one: equal-sized blocks that are reused, where blocks of varying sizes
    fragment the heap."""
    shape, count = frames.shape[1:], len(picks)
    if pool is not None and frames.device.type == "cpu":
        out = pool.take(shape, frames.dtype, count)
    else:
        out = [torch.empty(shape, dtype=frames.dtype, device=frames.device) for _ in range(count)]
    copy_picks(out, frames, picks)
    return out


def copy_picks(targets: list[torch.Tensor], frames: torch.Tensor, picks: np.ndarray) -> None:
    """Copy frames[picks[i]] into the contiguous (C, H, W) targets[i]: packed uint8 CPU frames by OpenCV (the
    output viewed as packed (N, H, W, C) once, not per frame), anything else by torch."""
    packed = frames.permute(0, 2, 3, 1)
    if frames.device.type != "cpu" or not packed.is_contiguous() or frames.dtype != torch.uint8:
        for target, pick in zip(targets, picks.tolist()):
            target.copy_(frames[pick])
        return
    packed_frames = packed.numpy()
    per_split = SPLIT_BYTES // max(1, packed_frames[0].nbytes) if len(packed_frames) else 0
    if per_split < SPLIT_RUN_MIN:  # larger frames: one split each, straight into its target
        for target, pick in zip(targets, picks.tolist()):
            _split_checked(packed_frames[pick], list(target.numpy()))
        return
    order = np.argsort(picks, kind="stable")
    sorted_picks = picks[order].tolist()
    i = 0
    while i < len(order):
        # The next run of frames split at once: from the first pick not yet copied, up to per_split frames.
        first = sorted_picks[i]
        j = i
        while j < len(order) and sorted_picks[j] < first + per_split:
            j += 1
        stop = sorted_picks[j - 1] + 1
        planar = _split_run(packed_frames[first:stop])
        for k in range(i, j):
            np.copyto(targets[int(order[k])].numpy(), planar[:, sorted_picks[k] - first])
        i = j


def _split_run(packed: np.ndarray) -> np.ndarray:
    """De-interleave packed (n, H, W, C) uint8 frames in one OpenCV call into this thread's scratch buffer, seen as
    (C, n, H, W): valid until the thread's next call."""
    n, height, width, channels = packed.shape
    scratch = getattr(_SCRATCH, "buffer", None)
    if scratch is None:
        scratch = _SCRATCH.buffer = np.empty(SPLIT_BYTES, dtype=np.uint8)
    planes = scratch[: packed.nbytes].reshape(channels, n * height, width)
    _split_checked(packed.reshape(n * height, width, channels), list(planes))
    return planes.reshape(channels, n, height, width)


def copy_chw(target: torch.Tensor, frame: torch.Tensor) -> None:
    """Copy one (C, H, W) frame, whatever its strides, into the contiguous (C, H, W) `target`."""
    packed = frame.permute(1, 2, 0)
    if frame.device.type != "cpu" or not packed.is_contiguous() or frame.dtype != torch.uint8:
        target.copy_(frame)
        return
    _split_checked(packed.numpy(), list(target.numpy()))


def _split_checked(packed: np.ndarray, planes: list[np.ndarray]) -> None:
    """De-interleave the packed (rows, W, C) uint8 `packed` into the given (rows, W) planes with OpenCV: one frame
    into its contiguous (C, H, W) target's planes, or several stacked frames."""
    written = cv2.split(packed, planes)
    # OpenCV silently allocates new planes when the given ones do not fit: never hand out unwritten memory.
    if len(written) != len(planes) or any(w is not p for w, p in zip(written, planes)):
        raise RuntimeError(f"cv2.split did not write into the (C, H, W) planes of a {packed.shape} frame")
