"""How a streaming dataset's epoch is cut into streams and each piece of it read (`StreamOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

from robostream.numbers import finite_number
from robostream.plan.epoch import Partition, Uneven

# The defaults, published so that the benchmark and the training command default to them by name.
DEFAULT_POOL_SIZE = 8
DEFAULT_UNEVEN: Uneven = "pad"
DEFAULT_PARTITION: Partition = "contiguous"
# decode_ahead by default (None): 16 samples for small frames, 4 for large ones (BENCHMARKS.md: the fourth session's
# issue 38 section, 4 -> 8 halved the seeks for +5-15% single frames and +10-16% RSS; the eleventh session's, 8 -> 16
# halved them again, 12.8 -> 6.5 seeks per 100 frames, for 6-11% less CPU per sample (single frames and windows, 3 x
# 128x128 and 3 x 256x256) and +16-33% PSS; the frames held grow with the frame size, +0.5 GiB per worker at 3 x
# 480x640 for 4 -> 8). A source whose camera files hold one episode each decodes small frames ahead up to 1 MiB of
# them (what 7 samples of 3 x 128x128 take) when that is more samples: a piece of tiny
# frames is then decoded whole in one call per camera and its decoders (~0.6 MiB each) are closed at once, where
# live pieces sharing files share their decoders (BENCHMARKS.md, tenth session's issue 35 section: 300 one-episode
# sources of 3 x 48x64).
SMALL_FRAMES_DECODE_AHEAD = 16
LARGE_FRAMES_DECODE_AHEAD = 4
SMALL_FRAMES_BYTES = 640 << 10  # a sample's camera frames (one per camera, RGB) up to this: 3 x 256x256 fits
OWN_FILES_DECODE_AHEAD_BYTES = 1 << 20  # small frames of a piece that alone reads its files: this much decoded ahead
# when that is more samples than the default


def default_decode_ahead(sample_frame_bytes: int, *, own_files: bool = False) -> int:
    """decode_ahead for a source whose sample carries `sample_frame_bytes` of camera frames (one per camera);
    own_files: each of its camera files holds one episode (EpisodeTable.own_video_files)."""
    if sample_frame_bytes > SMALL_FRAMES_BYTES:
        return LARGE_FRAMES_DECODE_AHEAD
    if own_files:
        return max(SMALL_FRAMES_DECODE_AHEAD, OWN_FILES_DECODE_AHEAD_BYTES // max(1, sample_frame_bytes))
    return SMALL_FRAMES_DECODE_AHEAD


DEFAULT_PREFETCH_PIECES = 2


@dataclass(frozen=True, kw_only=True)
class StreamOptions:
    """How an epoch is cut into canonical streams, how many pieces each keeps live, and how each piece is read
    (the streaming dataset's `streams=`).

    Args:
        pool_size: live pieces per canonical stream. Memory: a consumer holds pool_size x C/K pieces, each about
            (window span / window stride + 1 + decode_ahead) decoded frames per camera (single mode, 3 cameras
            256x256, decode_ahead 16: ~10 MiB). Randomness: a batch mixes up to min(batch, pool_size x C/K) episodes.
        canonical_streams: C, the streams an epoch is cut into (default lcm(consumers, 12) at the first start, then
            kept in the resume state). More streams mix more episodes per consumer, cut more in two.
        uneven: how ranks are kept at equal batch counts: "pad" repeats a few samples on ranks that have fewer,
            "drop" skips the few extra on the others.
        partition: "contiguous" (balanced streams, default) or "files" (whole-file groups; needs >= C groups).
        decode_ahead: samples of a piece whose missing frames are decoded together: each piece's frames are decoded
            in runs of this many samples (or more: a batch's samples of a piece are decoded together), one seek per
            run (memory vs seeks). Default (None): per source, 16 when
            a sample's camera frames (one per camera) take at most 640 KiB (3 cameras of 256x256), else 4: 16
            instead of 8 halved the seeks (6.5 per 100 frames) for 6-11% less CPU per sample and +16-33% memory.
            A source whose camera files hold one episode each (one-episode sources) decodes such frames ahead up to
            1 MiB of them when that is more than 16 samples (3 cameras of 48x64: 37): a piece decoded whole closes
            its decoders (~0.6 MiB each) at once.
        prefetch_pieces: remote data only: 0 turns off reading ahead. Otherwise the video bytes of the next picks
            are fetched ahead (as far as the store's measured latency asks, within the read buffer), each new
            piece's rows with its first pick's bytes; where no video bytes are fetched ahead (no cameras, or the
            disk cache), the rows of this many upcoming pieces per stream are read in a background thread.
    """

    pool_size: int = DEFAULT_POOL_SIZE
    canonical_streams: int | None = None
    uneven: Uneven = DEFAULT_UNEVEN
    partition: Partition = DEFAULT_PARTITION
    decode_ahead: int | None = None
    prefetch_pieces: int = DEFAULT_PREFETCH_PIECES

    def __post_init__(self) -> None:
        if self.uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={self.uneven!r}: expected 'pad' (repeat samples) or 'drop' (skip the tail)")
        if self.partition not in ("contiguous", "files"):
            raise ValueError(f"partition={self.partition!r}: expected 'contiguous' or 'files'")
        for name, value, least in (
            ("pool_size", self.pool_size, 1),
            ("decode_ahead", self.decode_ahead, 1),
            ("prefetch_pieces", self.prefetch_pieces, 0),
        ):
            if value is not None:
                finite_number(value, what=name, integer=True, minimum=least)
        if self.canonical_streams is not None:
            finite_number(self.canonical_streams, what="canonical_streams", integer=True, minimum=1)
