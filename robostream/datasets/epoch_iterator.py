"""One consumer's pass over its part of an epoch (MosaicML's `_Iterator` is the model): which sample comes next,
and the live pieces that produce it.

The plan (plan/epoch.py: EpochPlan) says which segments of which canonical streams this consumer role owns and how
many samples it yields, and `role_picks` the order of its picks; here every pick (stream, piece, position) becomes
a sample through the frame reader. Live pieces are opened on their first sample and dropped after their last.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from robostream.datasets.batch_assembly import Allocate as BatchAllocate
from robostream.datasets.mixture import SourceReader
from robostream.datasets.mixture_schema import MixtureBatches, MixtureSchema
from robostream.datasets.pick_read_ahead import PickReadAhead
from robostream.datasets.piece_reader import PieceReader
from robostream.datasets.reading import Reading
from robostream.plan.epoch import EpochPlan, Pick, role_picks
from robostream.plan.piece import PieceGeometry


class EpochIterator:
    """Samples of one consumer role, in order, until its quota is met (padding by repeating its own samples)."""

    def __init__(
        self,
        plan: EpochPlan,
        *,
        role: int,
        worker: int,
        sources: Sequence[SourceReader],
        schema: MixtureSchema | None,
        mixture_batches: MixtureBatches | None,
        reading: Reading,
        seed: int,
        epoch: int,
        pool_size: int,
        prefetch_pieces: int,
    ) -> None:
        """
        Args:
            plan: the pass's plan.
            role: this consumer's role.
            worker: this process's DataLoader worker id (its row of the counters).
            sources: the dataset's sources (one unless a mixture).
            schema: a mixture's common keys (None: samples as the one dataset gives them).
            mixture_batches: a mixture's batch assembler (None: one dataset, or per-sample transforms).
            reading: the dataset's reading (its counters, frame pool and settings).
            seed, epoch, pool_size, prefetch_pieces: the dataset's settings.
        """
        self.plan, self.role, self.worker = plan, role, worker
        self.sources, self.schema, self.mixture_batches = sources, schema, mixture_batches
        self.reading, self.counters = reading, reading.counters
        self._stages = reading.stage_times  # this process's stage totals
        self.seed, self.epoch, self.pool_size = seed, epoch, pool_size
        self.prefetch_pieces = prefetch_pieces
        self.emitted = 0  # samples yielded so far (counted before the yield: a consumer may never ask again)
        self._assembled = False  # a batch assembled in this pass (the first decodes no look-ahead)
        self._live_frames = 0
        # The largest decoded frames one live piece / all live pieces held, published per batch (or sample).
        self._peak_piece_frames = self._peak_live_frames = 0
        self._readers: dict[tuple[int, int], PieceReader] = {}
        # Live pieces partly decoded, by id: the decoders each holds open (VideoDecoderCache.hold), its cameras.
        self._holding: dict[int, int] = {}
        # Geometry of pieces about to go live (computed by whichever needs it first: read-ahead or opening).
        self._geometries: dict[tuple[int, int], PieceGeometry] = {}
        self._fetch_ahead = PickReadAhead(
            plan,
            readers=[source.frames for source in sources],
            locate=self._locate,
            geometry=self._geometry,
        )
        self._pick_iterator: Iterator[Pick] | None = None  # this pass's picks, once taking started

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while refs := self.take(1):
                yield self.sample(refs[0])
        finally:
            self.release()

    def batches(self, batch_size: int, drop_last: bool, allocate: BatchAllocate) -> Iterator[dict[str, Any]]:
        """The same samples as iteration, as whole batches of `batch_size` (the last one short unless
        `drop_last`): what a DataLoader worker gives when it collates this role's samples."""
        try:
            while refs := self.take(batch_size):
                if drop_last and len(refs) < batch_size:
                    return
                yield self.assemble(refs, allocate)
        finally:
            self.release()

    def take(self, count: int) -> list[tuple[PieceReader, int]]:
        """The next `count` picks (fewer at the end of the pass) as (live piece reader, position), counted as
        emitted."""
        started = time.perf_counter_ns()
        if self._pick_iterator is None:
            self._pick_iterator = self._picks()
        refs = [self._take(pick) for pick in itertools.islice(self._pick_iterator, count)]
        self.emitted += len(refs)
        self._stages.get().wall(time.perf_counter_ns() - started)
        return refs

    def sample(self, ref: tuple[PieceReader, int]) -> dict[str, Any]:
        """One taken pick as a sample (the per-sample path)."""
        started = time.perf_counter_ns()
        reader, position = ref
        source = self.sources[reader.source]
        frames = self._frames(reader, position)  # decoded here when missing (the decode stage)
        assembling = time.perf_counter_ns()
        sample = source.frames.sample(reader, position, frames, self.worker)
        if self.schema is not None:
            sample = self.schema.finish(sample, reader.source, source.rename)
        self._finished(started, assembling)
        return sample

    def assemble(self, refs: Sequence[tuple[PieceReader, int]], allocate: BatchAllocate) -> dict[str, Any]:
        """Taken picks (of any of the dataset's sources, from this or another pass) as one batch: the frames their
        pieces miss decoded with one call per camera file, everything written once into the batch."""
        started = time.perf_counter_ns()
        readers = {id(reader): reader for reader, _ in refs}
        held = sum(reader.resident for reader in readers.values())
        by_source: dict[int, list[tuple[PieceReader, int]]] = {}  # not a loop over sources: there may be 1000
        for ref in refs:
            by_source.setdefault(ref[0].source, []).append(ref)
        for index, mine in sorted(by_source.items()):
            if self.sources[index].meta.video_keys:
                self.sources[index].frames.prefill(mine, self.worker, pass_start=not self._assembled)
                for reader, _ in mine:  # before the next source's decoders open
                    self._hold(reader)
        decoded = sum(reader.resident for reader in readers.values())
        self._live_frames += decoded - held
        self._peak_live_frames = max(self._peak_live_frames, self._live_frames)
        self._peak_piece_frames = max(self._peak_piece_frames, *(reader.resident for reader in readers.values()))
        self._assembled = True
        assembling = time.perf_counter_ns()
        released: list[torch.Tensor] = []  # frames no later sample needs: copied into this batch, then reused
        # Every frame is held now (prefill, whose pieces were held or let go above): the working-set counters are
        # kept per batch, not per sample.
        video = [reader.window_frames(position, released) if reader.needed else {} for reader, position in refs]
        self._live_frames -= decoded - sum(reader.resident for reader in readers.values())
        for reader, position in refs:
            if position == len(reader.sample_frames) - 1:
                self._live_frames -= reader.resident  # none are left after the last sample; kept exact regardless
        if self.mixture_batches is None:  # one dataset: every ref is of its source
            batch = self.sources[refs[0][0].source].frames.batch(refs, video, self.worker, allocate)
        else:
            batch = self._mixture_batch(self.mixture_batches, refs, video, allocate)
        self.reading.frame_pool.get().give(released)
        self._finished(started, assembling)
        return batch

    def _finished(self, started: int, assembling: int) -> None:
        """A sample or batch is out (produced since `started`, assembled since `assembling`): its time counts in
        the assemble stage and the loop's wall time, and what the stages did reaches the worker's counters."""
        now = time.perf_counter_ns()
        stages = self._stages.get()
        stages.work("assemble", now - assembling)
        stages.wall(now - started)
        self.reading.count_stages(self.worker)
        self.counters.record(
            self.worker,
            peaks=(("peak_piece_frames", self._peak_piece_frames), ("peak_live_frames", self._peak_live_frames)),
        )

    def _mixture_batch(
        self,
        mixture_batches: MixtureBatches,
        refs: Sequence[tuple[PieceReader, int]],
        video: Sequence[dict[str, list[torch.Tensor]]],
        allocate: BatchAllocate,
    ) -> dict[str, Any]:
        groups: dict[int, list[int]] = {}
        for i, (reader, _) in enumerate(refs):
            groups.setdefault(reader.source, []).append(i)
        for source, members in groups.items():
            self.sources[source].frames.count_frames(self.worker, [video[i] for i in members])
        self.reading.count_reads(self.worker)
        rows = [(reader.rows, int(reader.sample_frames[position])) for reader, position in refs]
        return mixture_batches.assemble([reader.source for reader, _ in refs], rows, video, allocate)

    def _picks(self) -> Iterator[Pick]:
        picks = role_picks(
            self.plan,
            self.role,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.reading.settings.shuffle,
            pool_size=self.pool_size,
        )
        return self._fetch_ahead(picks) if self._fetch_ahead.enabled else picks

    def _take(self, pick: Pick) -> tuple[PieceReader, int]:
        """The live piece reader of a pick (opened on its first sample, dropped after its last) and the position."""
        stream, piece, position = pick
        key = (stream, piece)
        reader = self._readers.get(key)
        pieces = self.plan.pieces[stream]
        if reader is None:
            index, episode, _ = self._locate(pieces[piece][0])
            source = self.sources[index]
            reader = self._readers[key] = source.frames.open_piece(episode, self._geometry(stream, piece), self.worker)
            del self._geometries[key]  # the piece reader holds it now
            for unit, _, _ in pieces[piece + 1 : piece + 1 + self.prefetch_pieces]:
                ahead, episode, _ = self._locate(unit)
                frames = self.sources[ahead].frames
                # a source whose picks' bytes are fetched ahead has its rows read as its picks are taken ahead
                # (pick_read_ahead.py): here they would be read rounds early, before the pass's first batch
                if not frames.video_ahead.enabled:
                    frames.rows.read_ahead(episode)
            if source.meta.video_keys:
                self.counters.peak(self.worker, "peak_live_pieces", len(self._readers))
            if not source.frames.own_files:  # its files' decoders may serve other live pieces: kept from now on
                self._hold(reader)
        if position == len(reader.sample_frames) - 1:
            del self._readers[key]  # the reader lives on in the caller until its last sample's frames are out
            self._fetch_ahead.done(stream, piece)
        return reader, position

    def _hold(self, reader: PieceReader) -> None:
        """Keep room in the decoder cache for a live piece's cameras while it has frames left to decode, and give
        it back once it has none (called after its decoder calls): the least recently used decoders beyond the
        cache's own size and the room held are closed, so open decoders follow the pieces still decoding, not the
        live ones. A piece holds from going live when its files may be shared, else from its first decoder call
        (a batch of many one-episode pieces then opens their files within the cache's own size, not all at once):
        a piece of one-episode files decoded whole in one call (tiny frames) gives its decoders back at once."""
        cameras = self._holding.get(id(reader))
        if cameras is None and reader.undecoded:
            self._holding[id(reader)] = len(reader.needed)
            self.reading.decoders.hold(len(reader.needed))
        elif cameras is not None and not reader.undecoded:
            del self._holding[id(reader)]
            self.reading.decoders.hold(-cameras)

    def release(self) -> None:
        """The pass ended (or was abandoned): give back the room its live pieces held."""
        if self._holding:
            self.reading.decoders.hold(-sum(self._holding.values()))
            self._holding.clear()

    def _locate(self, unit: int) -> tuple[int, int, int]:
        """The source index, episode index and first frame of an epoch unit."""
        source, position, offset = self.plan.units.locate(unit)
        return source, self.sources[source].episodes[position], offset

    def _geometry(self, stream: int, piece: int) -> PieceGeometry:
        """The geometry of a piece about to go live, computed once for the read-ahead and the frame reader."""
        key = (stream, piece)
        geometry = self._geometries.get(key)
        if geometry is None:
            unit, first, stop = self.plan.pieces[stream][piece]
            index, episode, offset = self._locate(unit)
            geometry = self._geometries[key] = self.sources[index].frames.geometry(
                episode, offset + first, offset + stop
            )
        return geometry

    def _frames(
        self, reader: PieceReader, position: int, released: list[torch.Tensor] | None = None
    ) -> dict[str, list[torch.Tensor]]:
        """The sample's decoded window frames per camera, with the working-set counters kept (frames forgotten
        go to `released`, see PieceReader.window_frames)."""
        if not reader.needed:
            return {}
        held = reader.resident
        frames = reader.window_frames(position, released)
        self._hold(reader)
        self._live_frames += reader.resident - held  # a running total: only this reader's count changed
        if reader.resident > self._peak_piece_frames:
            self._peak_piece_frames = reader.resident
        if self._live_frames > self._peak_live_frames:
            self._peak_live_frames = self._live_frames
        if position == len(reader.sample_frames) - 1:
            self._live_frames -= reader.resident  # none are left after the last sample; kept exact regardless
        return frames
