"""Whole batches assembled at once: the streaming loader's fast path, equal to the collate of the samples.

The per-sample path builds a dict of small tensors per sample (SampleAssembler.assemble) and torch's collate then
stacks B of each. Here the batch's tensors are allocated once (in DataLoader workers: one reused shared-memory
slot, see batch_buffers.py), numeric columns are written with numpy per piece of the batch, and each camera frame
is copied once from the decoder's output into its place in the batch, laid out as (C, H, W). Keys, order, dtypes,
shapes and values are those of `collate_samples([assemble(...) for each sample])` (datasets/collate.py: torch's
`default_collate`, language columns as lists; tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from robostream.datasets.sample import SampleAssembler, decode_png
from robostream.errors import DatasetFormatError
from robostream.format.data_rows import EpisodeRows
from robostream.format.language import language_cell
from robostream.plan.windows import window_indices

# key -> (shape, dtype) of the batch tensor
TensorSpecs = dict[str, tuple[tuple[int, ...], torch.dtype]]
# TensorSpecs -> an uninitialised tensor per key (fresh memory, or a reused shared-memory slot in a worker)
Allocate = Callable[[TensorSpecs], dict[str, torch.Tensor]]
BatchRef = tuple[EpisodeRows, int]  # (the episode's rows, frame within the episode) of one sample


@dataclass(frozen=True)
class PreparedBatch:
    """What `BatchAssembler.prepare` works out before anything is written."""

    frames: np.ndarray  # per sample: its frame within its episode
    query: dict[str, np.ndarray]  # per windowed key: (B, T) frames to read
    pads: dict[str, np.ndarray]  # per windowed key: (B, T) padding masks
    specs: TensorSpecs  # CPU tensors of the batch
    on_device: dict[str, tuple[tuple[int, ...], torch.dtype, torch.device]]  # cameras decoded on a GPU
    cameras: list[str]  # camera keys scaled to float after writing unless uint8 (not depth cameras)
    keys: list[str]  # the batch's keys, in the per-sample order (SampleAssembler.order)


def allocate_fresh(specs: TensorSpecs) -> dict[str, torch.Tensor]:
    return {key: torch.empty(shape, dtype=dtype) for key, (shape, dtype) in specs.items()}


class BatchAssembler:
    """Builds the batch of B samples from their rows, frames and decoded camera frames."""

    def __init__(self, assembler: SampleAssembler) -> None:
        if assembler.image_transforms is not None:
            raise ValueError("image_transforms run per sample: batches with transforms go through the per-sample path")
        self.sample = assembler
        self.meta = assembler.meta

    def assemble(
        self,
        refs: Sequence[BatchRef],
        video: Sequence[Mapping[str, Sequence[torch.Tensor]]],
        allocate: Allocate = allocate_fresh,
    ) -> dict[str, Any]:
        """The batch of `refs`; video[i][key] holds the T uint8 (C, H, W) frames of sample i's window of `key`."""
        prepared = self.prepare(refs, video)
        out = {
            **allocate(prepared.specs),
            **{
                key: torch.empty(shape, dtype=dtype, device=device)
                for key, (shape, dtype, device) in prepared.on_device.items()
            },
        }
        lists = self.write(prepared, refs, video, out)
        return {
            key: lists[key]
            if key in lists
            else finish_cameras(out[key], self.sample.return_uint8)
            if key in prepared.cameras
            else out[key]
            for key in prepared.keys
        }

    def prepare(self, refs: Sequence[BatchRef], video: Sequence[Mapping[str, Sequence[torch.Tensor]]]) -> PreparedBatch:
        """Windows, masks and tensor specs of the batch of `refs` (nothing written yet)."""
        first_rows = refs[0][0]
        frames = np.fromiter((f for _, f in refs), dtype=np.int64, count=len(refs))
        lengths = np.fromiter((len(r) for r, _ in refs), dtype=np.int64, count=len(refs))
        query, pads = {}, {}
        for key, offsets in self.sample.delta_offsets.items():
            query[key], pads[key] = window_indices(frames[:, None], 0, lengths[:, None], offsets[None, :])
        specs: TensorSpecs = {f"{key}_is_pad": (pad.shape, torch.bool) for key, pad in pads.items()}
        for key, values in first_rows.columns.items():
            window_shape = query[key].shape[1:] if key in query else ()
            specs[key] = ((len(refs), *window_shape, *values.shape[1:]), _torch_dtype(values.dtype))
        camera_dtype = torch.uint8 if self.sample.return_uint8 else torch.float32
        for key in first_rows.images:
            specs[key] = (self._image_shape(key, query, refs), camera_dtype)
        on_device = {}  # cameras decoded on a GPU (NVDEC) stay there, outside the (CPU) allocation
        depth = self.meta.depth_codings
        for key in self.meta.video_keys:
            window = video[0][key]
            squeeze = () if len(window) == 1 else (len(window),)
            shape = (len(refs), *squeeze, *window[0].shape)
            dtype = torch.float32 if key in depth else camera_dtype
            if window[0].device.type == "cpu":
                specs[key] = (shape, dtype)
            else:
                on_device[key] = (shape, dtype, window[0].device)
        # Scaled to float after writing unless uint8; depth cameras hold their final values already.
        cameras = [*first_rows.images, *(k for k in self.meta.video_keys if k not in depth)]
        return PreparedBatch(frames, query, pads, specs, on_device, cameras, self.sample.order)

    def write(
        self,
        prepared: PreparedBatch,
        refs: Sequence[BatchRef],
        video: Sequence[Mapping[str, Sequence[torch.Tensor]]],
        out: Mapping[str, torch.Tensor],
        rows: np.ndarray | None = None,
    ) -> dict[str, list[Any]]:
        """Write the batch's tensors into `out` (keyed like `prepared.specs` and `.on_device`; cameras uint8 or
        their values before the float scaling, see `finish_cameras`), at `rows` of them (default: all, in order).

        Returns:
            The string and language keys and "task", one list each (in refs order).
        """
        place = np.arange(len(refs)) if rows is None else rows
        for key, pad in prepared.pads.items():
            target = out[f"{key}_is_pad"].numpy()
            if rows is None:
                target[:] = pad
            else:
                target[rows] = pad
        self._write_columns(refs, prepared.frames, prepared.query, out, rows)
        first_rows = refs[0][0]
        lists: dict[str, list[Any]] = {
            key: [episode.strings[key][frame] for episode, frame in refs] for key in first_rows.strings
        }
        lists.update(
            {
                key: [language_cell(episode.language[key][frame], key) for episode, frame in refs]
                for key in first_rows.language
            }
        )
        for key in first_rows.images:
            for j, (episode_rows, frame) in enumerate(refs):
                cells = episode_rows.images[key]
                picks = prepared.query[key][j].tolist() if key in prepared.query else [frame]
                images = [decode_png(cells[int(f)].as_py()) for f in picks]
                _copy_window(out[key][int(place[j])], images, key, episode_rows.episode)
        episodes = [episode_rows.episode for episode_rows, _ in refs]
        for key in self.meta.video_keys:
            _copy_camera(out[key], [window[key] for window in video], key, episodes, None if rows is None else place)
        lists["task"] = [self.meta.task(int(episode.columns["task_index"][frame])) for episode, frame in refs]
        return lists

    def _write_columns(
        self,
        refs: Sequence[BatchRef],
        frames: np.ndarray,
        query: Mapping[str, np.ndarray],
        out: Mapping[str, torch.Tensor],
        rows: np.ndarray | None,
    ) -> None:
        """Numeric columns: one numpy take per key for each run of consecutive samples from the same episode."""
        targets = {key: out[key].numpy() for key in refs[0][0].columns}
        start = 0
        while start < len(refs):
            episode_rows = refs[start][0]
            stop = start + 1
            while stop < len(refs) and refs[stop][0] is episode_rows:
                stop += 1
            where = slice(start, stop) if rows is None else rows[start:stop]
            for key, values in episode_rows.columns.items():
                picks = query[key][start:stop] if key in query else frames[start:stop]
                targets[key][where] = values[picks]
            start = stop

    def _image_shape(self, key: str, query: Mapping[str, np.ndarray], refs: Sequence[BatchRef]) -> tuple[int, ...]:
        height, width, channels = self.meta.info.features[key]["shape"]
        window = (query[key].shape[1],) if key in query else ()
        return (len(refs), *window, channels, height, width)


def finish_cameras(cameras: torch.Tensor, return_uint8: bool) -> torch.Tensor:
    """uint8 frames were written; float batches hold the converted values, scaled here in place."""
    if not return_uint8:
        cameras.div_(255.0)  # the same float32 arithmetic as SampleAssembler's `frames.to(float32) / 255.0`
    return cameras


def _copy_camera(
    dest: torch.Tensor,
    windows: Sequence[Sequence[torch.Tensor]],
    key: str,
    episodes: Sequence[int],
    place: np.ndarray | None,
) -> None:
    """Copy each sample's window of camera `key` into the batch tensor dest ((B, C, H, W), or (B, T, C, H, W)), at
    dest[place[j]] for sample j (None: in order). CPU frames filling the batch in order go in one numpy call (no
    Python per frame beyond its numpy view); anything else window by window (`_copy_window`)."""
    if (
        place is None
        and dest.is_cpu
        and dest.is_contiguous()
        and all(frame.is_cpu for window in windows for frame in window)
    ):
        expected = tuple(dest.shape[-3:])
        arrays = [frame.numpy() for window in windows for frame in window]
        if len(arrays) == dest.numel() // max(1, math.prod(expected)) and all(a.shape == expected for a in arrays):
            # one concatenate (converting uint8 to float where the batch holds floats), on the calling thread
            np.stack(arrays, out=dest.numpy().reshape(-1, *expected))  # a view: dest is contiguous
            return
    for i, window, episode in zip(range(len(windows)) if place is None else place.tolist(), windows, episodes):
        _copy_window(dest[i], window, key, episode)


def _copy_window(dest: torch.Tensor, frames: Sequence[torch.Tensor], key: str, episode: int) -> None:
    """Copy T (C, H, W) frames into dest, (C, H, W) when T == 1 else (T, C, H, W); converts uint8 -> float.

    CPU frames are copied by numpy: torch splits a copy this size over its intra-op threads, and in a process that
    keeps them (the loader in the training process, num_workers=0) each of a batch's ~100 copies then waits for a
    thread the decode threads keep busy: 2.3-2.9x slower single frames in-process measured (DataLoader workers run
    torch on one thread)."""
    expected = dest.shape[-3:]
    for frame in frames:
        if frame.shape != expected:
            raise DatasetFormatError(
                f"episode {episode}, camera {key!r}: decoded frames of shape {tuple(frame.shape)} where the batch "
                f"holds {tuple(expected)}: all episodes of a camera must have one size"
            )
    if dest.device.type == "cpu" and all(frame.device.type == "cpu" for frame in frames):
        target = dest.numpy()
        for slot, frame in zip(target if len(frames) > 1 else [target], frames):
            np.copyto(slot, frame.numpy())
        return
    if len(frames) == 1:
        dest.copy_(frames[0])
        return
    for slot, frame in zip(dest, frames):
        slot.copy_(frame)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
