"""The sample keys of a mixture: each source's features under common names, checked, in one order.

Features are never dropped silently. `features="strict"` (default) needs every source to have the same keys (after
its `feature_map`), with the same dtype, shape and window length, else construction fails naming the key and the
sources. `features="union"` lets a source lack a key: its samples get zeros (strings: "", language columns: [])
there and `<key>_is_pad` True (the key's window mask when it has `delta_timestamps`, else one flag per sample;
sources that have the key say False). A key two sources have with different dtype or shape is an error in both
modes: rename one with `feature_map`.

Both the per-sample path (`finish`) and the batch path (`MixtureBatches`) emit the keys in `order`, so batches are
the collate of the samples (datasets/collate.py). Every mixture sample also carries `dataset_index` (int64, 0-d):
its source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow.parquet as pq
import torch

from robostream.datasets.batch_assembly import Allocate, BatchAssembler, BatchRef, allocate_fresh, finish_cameras
from robostream.datasets.sample_keys import DATASET_INDEX, TASK, KeySpec, feature_keys, key_order, with_window
from robostream.format.metadata import DatasetMetadata

FeatureMode = Literal["strict", "union"]
SchemaMode = Literal["strict", "union", "separate"]  # separate: batches never mix sources (batching="per_stream")
RESERVED = ("index", "episode_index", "frame_index", "timestamp", "task_index")  # every dataset has them as is


def source_specs(
    meta: DatasetMetadata, feature_map: Mapping[str, str], windows: Mapping[str, int], name: str
) -> dict[str, KeySpec]:
    """The source's features (sample_keys.feature_keys) under their common names, with their windows.

    Args:
        meta: the source's metadata.
        feature_map: source key -> common name.
        windows: common name -> frames in its window (the delta_timestamps that apply to this source).
        name: the source's label for errors.
    """
    features = feature_keys(meta, {})
    unknown = [k for k in feature_map if k not in features]
    if unknown:
        raise ValueError(
            f"source {name}: feature_map renames {unknown}, which it does not have; its features: {list(features)}"
        )
    renamed_reserved = [k for k in feature_map if k in RESERVED and feature_map[k] != k]
    if renamed_reserved:
        raise ValueError(
            f"source {name}: feature_map renames {renamed_reserved}; the locating columns {RESERVED} keep their names"
        )
    specs: dict[str, KeySpec] = {}
    for key, spec in features.items():
        common = feature_map.get(key, key)
        if common in specs or common in (DATASET_INDEX, TASK):
            raise ValueError(
                f"source {name}: feature_map gives two features the name {common!r} (or a reserved "
                f"sample key); every common name must be unique"
            )
        window = windows.get(common)
        specs[common] = spec if window is None else with_window(common, spec, window)  # feature_keys: no window
    return specs


@dataclass(frozen=True)
class Fill:
    """What a source that lacks a key gets there (union mode)."""

    shape: tuple[int, ...]  # per sample
    dtype: torch.dtype | None  # None: a string or language key (a list per batch)
    pad_shape: tuple[int, ...]  # of `<key>_is_pad`: the window, or () for one flag
    kind: str = "column"  # the key's KeySpec.kind

    def blank(self) -> Any:
        """The value of a list key (dtype None) in a sample that lacks it: "" for a string, a fresh [] for a
        language column (no rows, lerobot's value for a frame without annotations)."""
        return [] if self.kind == "language" else ""


class MixtureSchema:
    """Common keys of the sources, their order, and the fills of union mode."""

    def __init__(
        self,
        metas: Sequence[DatasetMetadata],
        specs: Sequence[dict[str, KeySpec]],
        renames: Sequence[Mapping[str, str]],
        names: Sequence[str],
        mode: SchemaMode,
        return_uint8: bool,
    ) -> None:
        """
        Args:
            metas: per source its metadata.
            specs: per source `source_specs`.
            renames: per source its feature_map (source key -> common name).
            names: per source a label for errors.
            mode: "strict" or "union"; "separate" when every batch holds one source: each keeps its own keys,
                dtypes and shapes (under the common names), nothing is checked across sources or filled.
            return_uint8: cameras are uint8 (else float32).
        """
        if mode not in ("strict", "union", "separate"):
            raise ValueError(f"features={mode!r}: expected 'strict' (same keys everywhere) or 'union'")
        self.names = list(names)
        owners: dict[str, int] = {}
        for s, source in enumerate(specs):
            for key, spec in source.items():
                first = owners.setdefault(key, s)
                if spec != specs[first][key] and mode != "separate":
                    other = specs[first][key]
                    raise ValueError(
                        f"feature {key!r} is {_describe(other)} in source {names[first]} but {_describe(spec)} in "
                        f"source {names[s]}: give one a different name with Source(feature_map=...) (and "
                        "features='union'), or select the same window"
                    )
        self.missing = [[k for k in owners if k not in source] if mode != "separate" else [] for source in specs]
        if mode == "strict":
            for s, lacking in enumerate(self.missing):
                if lacking:
                    has = names[owners[lacking[0]]]
                    raise ValueError(
                        f"feature {lacking[0]!r} is in source {has} but not in source {names[s]} (it lacks "
                        f"{lacking}): map its own feature to that name with Source(feature_map={{...}}), or pass "
                        "features='union' to fill it with zeros and `<key>_is_pad` True"
                    )
        lacked = {k for lacking in self.missing for k in lacking}
        source_key = [{common: key for key, common in rename.items()} for rename in renames]
        self.fills = {
            key: self._fill(
                metas[owners[key]], source_key[owners[key]].get(key, key), specs[owners[key]][key], return_uint8
            )
            for key in owners
            if key in lacked
        }
        # Cameras scaled to float after writing unless uint8 (depth cameras hold their final values already).
        self.cameras = {
            k for source in specs for k, spec in source.items() if spec.kind == "camera" and spec.dtype != "depth"
        }
        # One key order for all sources (sample_keys.key_order), or each its own when batches never mix them.
        groups = [range(len(specs))] if mode != "separate" else [[s] for s in range(len(specs))]
        orders = []
        for members in groups:
            ordered = list(dict.fromkeys(k for m in members for k in specs[m]))
            spec_of = {k: next(specs[m][k] for m in members if k in specs[m]) for k in ordered}
            orders.append(key_order(spec_of, flags=[k for k in self.fills if spec_of[k].window is None], mixture=True))
        self.orders = orders * len(specs) if mode != "separate" else orders

    @staticmethod
    def _fill(meta: DatasetMetadata, key: str, spec: KeySpec, return_uint8: bool) -> Fill:
        """The fill of common key `key` (named `key` in `meta`, a source that has it)."""
        window = () if spec.window is None else (spec.window,)  # also the shape of its `_is_pad`
        if spec.kind == "camera":
            height, width, channels = spec.shape
            dtype = torch.uint8 if return_uint8 and spec.dtype != "depth" else torch.float32
            return Fill((*window, channels, height, width), dtype, window)
        if spec.kind in ("string", "language"):
            return Fill((), None, window, spec.kind)
        # info.json writes scalars as [1] but samples hold them 0-d: the Arrow type of one data file tells.
        shape, dtype = _column_shape(meta, key, spec.shape)
        return Fill((*window, *shape), dtype, window)

    def finish(self, sample: Mapping[str, Any], source: int, rename: Mapping[str, str]) -> dict[str, Any]:
        """One source's sample under the common names, filled and in order, with `dataset_index`."""
        named = {_common(k, rename): v for k, v in sample.items()}
        lacking = set(self.missing[source])
        out: dict[str, Any] = {}
        for key in self.orders[source]:
            if key in named:
                out[key] = named[key]
            elif key == DATASET_INDEX:
                out[key] = torch.tensor(source, dtype=torch.int64)
            elif key in self.fills:
                fill = self.fills[key]
                out[key] = fill.blank() if fill.dtype is None else torch.zeros(fill.shape, dtype=fill.dtype)
            else:  # a mask: of a window this source lacks (all padding), or the union flag of a plain key
                base = key[:-7]
                out[key] = torch.full(self.fills[base].pad_shape, base in lacking, dtype=torch.bool)
        return out


class MixtureBatches:
    """Whole batches whose samples come from several sources: each source's assembler writes its rows in place."""

    def __init__(
        self, schema: MixtureSchema, assemblers: Sequence[BatchAssembler], renames: Sequence[Mapping[str, str]]
    ) -> None:
        self.schema = schema
        self.assemblers = list(assemblers)
        self.renames = [dict(r) for r in renames]

    def assemble(
        self,
        sources: Sequence[int],
        refs: Sequence[BatchRef],
        video: Sequence[Mapping[str, Sequence[torch.Tensor]]],
        allocate: Allocate = allocate_fresh,
    ) -> dict[str, Any]:
        """The batch of `refs`, where sample i comes from source sources[i] (see BatchAssembler.assemble)."""
        size = len(refs)
        source_of = np.asarray(sources, dtype=np.int64)
        groups = []
        for s in dict.fromkeys(source_of.tolist()):
            rows = np.flatnonzero(source_of == s)
            part_refs = [refs[i] for i in rows.tolist()]
            part_video = [video[i] for i in rows.tolist()]
            groups.append((s, rows, part_refs, part_video, self.assemblers[s].prepare(part_refs, part_video)))
        specs: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        on_device: dict[str, torch.Tensor] = {}
        for s, rows, _, _, prepared in groups:
            rename = self.renames[s]
            for key, (shape, dtype) in prepared.specs.items():
                common = _common(key, rename)
                specs.setdefault(common, ((size, *shape[1:]), dtype))
            for key, (shape, dtype, device) in prepared.on_device.items():
                common = rename.get(key, key)
                if common not in on_device:
                    on_device[common] = torch.empty((size, *shape[1:]), dtype=dtype, device=device)
        for key, fill in self.schema.fills.items():
            if fill.dtype is not None and key not in specs and key not in on_device:
                specs[key] = ((size, *fill.shape), fill.dtype)
            pad = f"{key}_is_pad"
            specs.setdefault(pad, ((size, *fill.pad_shape), torch.bool))
        specs[DATASET_INDEX] = ((size,), torch.int64)
        out = {**allocate(specs), **on_device}
        lists: dict[str, list[Any]] = {}
        for s, rows, part_refs, part_video, prepared in groups:
            rename = self.renames[s]
            targets = {key: out[_common(key, rename)] for key in prepared.specs} | {
                key: out[rename.get(key, key)] for key in prepared.on_device
            }
            part_lists = self.assemblers[s].write(prepared, part_refs, part_video, targets, rows)
            for key, values in part_lists.items():
                common = rename.get(key, key)
                column = lists.setdefault(common, self._list_column(common, size))
                for row, value in zip(rows.tolist(), values):
                    column[row] = value
            for key in self.schema.missing[s]:
                fill = self.schema.fills[key]
                if fill.dtype is not None:
                    out[key][torch.from_numpy(rows)] = 0
                out[f"{key}_is_pad"][torch.from_numpy(rows)] = True
            for key, fill in self.schema.fills.items():
                if key not in self.schema.missing[s] and fill.pad_shape == ():
                    out[f"{key}_is_pad"][torch.from_numpy(rows)] = False
        for key, fill in self.schema.fills.items():
            if fill.dtype is None:
                lists.setdefault(key, self._list_column(key, size))
        out[DATASET_INDEX].copy_(torch.from_numpy(source_of))
        return_uint8 = self.assemblers[0].sample.return_uint8
        batch: dict[str, Any] = {}
        for key in self.schema.orders[groups[0][0]]:  # one order for all sources, or one source per batch
            if key in lists:
                batch[key] = lists[key]
            else:
                value = out[key]
                batch[key] = finish_cameras(value, return_uint8) if key in self.schema.cameras else value
        return batch

    def _list_column(self, key: str, size: int) -> list[Any]:
        """A batch's list for list key `key` (common name) before the sources write theirs: the fill of union mode
        where a source lacks the key (its rows keep it), else placeholders every source overwrites."""
        fill = self.schema.fills.get(key)
        return [fill.blank() if fill is not None else None for _ in range(size)]


def _common(key: str, rename: Mapping[str, str]) -> str:
    """A source's batch key under its common name (`<key>_is_pad` follows its key)."""
    if key.endswith("_is_pad") and key[:-7] in rename:
        return f"{rename[key[:-7]]}_is_pad"
    return rename.get(key, key)


def _describe(spec: KeySpec) -> str:
    window = "" if spec.window is None else f", a window of {spec.window} frames"
    return f"a {spec.kind} of dtype {spec.dtype} and shape {list(spec.shape)}{window}"


def _column_shape(meta: DatasetMetadata, key: str, info_shape: tuple[int, ...]) -> tuple[tuple[int, ...], torch.dtype]:
    """A numeric column's per-frame shape and dtype as samples hold it: the dtype info.json declares (reads cast to
    it, format/data_rows.feature_column), and the info.json shape for a list column, () for a plain one (the Arrow
    type of the first episode's data file tells; a scalar column declared wider fails when read)."""
    import pyarrow as pa

    relative = meta.data_file(int(meta.episodes.episode_index[0]))
    kind = pq.ParquetFile(meta.open(relative, what=f"data file (schema of {key!r})")).schema_arrow.field(key).type
    nested = pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind)
    dtype = torch.from_numpy(np.empty(0, dtype=np.dtype(meta.info.features[key]["dtype"]))).dtype
    return (info_shape if nested else ()), dtype
