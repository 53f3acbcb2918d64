"""One description of a sample's keys: what each feature gives a sample (kind, dtype, shape, window) and the order
of the keys, built once per dataset (SampleAssembler) and per mixture (MixtureSchema). The per-sample path, the
batch path and mixtures all emit keys in `key_order`, so a batch is torch's collate of the samples and a new kind
of key is taught here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from robostream.format.data_rows import data_features
from robostream.format.language import LANGUAGE_DTYPE
from robostream.format.metadata import DatasetMetadata

DATASET_INDEX = "dataset_index"  # a mixture sample's source
TASK = "task"
KeyKind = Literal["column", "string", "language", "camera"]


@dataclass(frozen=True)
class KeySpec:
    """One feature as samples hold it."""

    kind: KeyKind
    dtype: str  # info.json dtype; "camera" for video and image features, "depth" for depth cameras (float32 (1, H, W))
    shape: tuple[int, ...]  # info.json shape (cameras: height, width, channels)
    window: int | None  # frames in its delta_timestamps window; None without one


def feature_keys(meta: DatasetMetadata, windows: Mapping[str, int]) -> dict[str, KeySpec]:
    """Every feature of a dataset as a sample key, in data-file order (info.json's, after the index columns every
    data file has where info.json does not declare them).

    Args:
        meta: the dataset's metadata.
        windows: key -> frames in its delta_timestamps window.
    """
    specs = {}
    depth = meta.depth_codings
    for key, feature in data_features(meta.info.features).items():
        dtype = feature["dtype"]
        kind: KeyKind = (
            "camera"
            if dtype in ("video", "image")
            else "string"
            if dtype == "string"
            else "language"
            if dtype == LANGUAGE_DTYPE
            else "column"
        )
        if kind == "camera":
            dtype = "depth" if key in depth else "camera"
        spec = KeySpec(kind, dtype, tuple(feature["shape"]), None)
        specs[key] = with_window(key, spec, windows.get(key))
    return specs


def with_window(key: str, spec: KeySpec, window: int | None) -> KeySpec:
    """`spec` with its delta_timestamps window. A language column has none: each frame's cell already holds the
    episode's persistent rows, and lerobot fails on such a window (its reader torch.stacks the cells)."""
    if window is not None and spec.kind == "language":
        raise ValueError(
            f"delta_timestamps[{key!r}]: {key!r} is a language column, which has no window (every "
            "sample carries its own frame's rows, the persistent ones included); remove it from "
            "delta_timestamps"
        )
    return spec if spec.window == window else replace(spec, window=window)  # one copy fewer per key and source


def pad_key(key: str) -> str:
    """The padding mask of `key`'s window (or, in a union mixture, of a key its source lacks)."""
    return f"{key}_is_pad"


def key_order(specs: Mapping[str, KeySpec], *, flags: Sequence[str] = (), mixture: bool = False) -> list[str]:
    """The keys of a sample, in the order every path emits them: the masks of windowed keys, numeric columns,
    strings, language columns, cameras, "task", then for a mixture the masks of plain keys some source lacks
    (`flags`) and `dataset_index`.

    Args:
        specs: the sample's keys (`feature_keys`, or a mixture's common keys).
        flags: plain (unwindowed) keys that carry a one-flag `_is_pad` (union mixtures).
        mixture: add `dataset_index`.
    """
    order = [pad_key(k) for k, spec in specs.items() if spec.window is not None]
    for kind in ("column", "string", "language", "camera"):
        order += [k for k, spec in specs.items() if spec.kind == kind]
    return [*order, TASK, *(pad_key(k) for k in flags), *([DATASET_INDEX] if mixture else [])]
