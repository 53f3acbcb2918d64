"""The streaming dataset's option groups (Mixture, StreamOptions, DecodeOptions) check their fields when made,
naming the field and the value; the datasets take them whole."""

import pytest

from robostream import DecodeOptions, LeRobotDataset, Mixture, Source, StreamingLeRobotDataset, StreamOptions
from robostream.datasets.stream_options import default_decode_ahead


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sources": []}, r"sources=\[\]: expected a non-empty list of Source"),
        ({"sources": [{"root": "a"}]}, r"sources\[0\] is \{'root': 'a'\}: expected a robostream.Source"),
        ({"epoch_size": 0}, "epoch_size: must be >= 1, got 0"),
        ({"epoch_size": 2.5}, "epoch_size: expected an integer"),
        ({"sampling_method": "even"}, "sampling_method='even': expected 'balanced' or 'fixed'"),
        ({"features": "all"}, "features='all': expected 'strict'"),
        ({"batching": "sorted"}, "batching='sorted': expected 'random', 'per_stream' or 'stratified'"),
        ({"batch_size": 8}, "batch_size=8 plans batching='per_stream' or 'stratified'"),
        ({"batching": "stratified"}, "batching='stratified' needs batch_size= .*, got None"),
        ({"batching": "per_stream", "batch_size": 0}, "batching='per_stream' needs batch_size= .*, got 0"),
        ({"batching": "per_stream", "batch_size": 8, "features": "union"}, "features='union' applies to"),
    ],
)
def test_a_mixture_refuses_bad_fields_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        Mixture(**{"sources": [Source(root="a"), Source(root="b")], **fields})


def test_a_mixture_holds_its_sources_as_a_tuple():
    sources = [Source(root="a")]
    mixture = Mixture(sources=sources)
    sources.append(Source(root="b"))  # the caller's list changing later does not change the mixture
    assert mixture.sources == (Source(root="a"),)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"device": "gpu"}, "device='gpu': expected 'cpu', 'cuda' or 'cuda:N'"),
        ({"device": "cuda:x"}, "device='cuda:x'"),
        ({"decoders_kept": 0}, "decoders_kept: must be >= 1, got 0"),
        ({"decoders_kept": 1.5}, "decoders_kept: expected an integer"),
    ],
)
def test_decode_options_refuse_bad_fields_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        DecodeOptions(**fields)


def test_decode_options_take_cpu_and_cuda_devices():
    assert [DecodeOptions(device=d).device for d in ("cpu", "cuda", "cuda:1")] == ["cpu", "cuda", "cuda:1"]


def test_a_mixture_and_one_datasets_location_do_not_go_together(av1_root):
    with pytest.raises(ValueError, match=r"mixture= names its datasets: pass no \['root', 'episodes'\]"):
        StreamingLeRobotDataset(root=av1_root, episodes=[0], mixture=Mixture(sources=[Source(root=av1_root)]))
    with pytest.raises(ValueError, match="needs root= .*, repo_id= or mixture="):
        StreamingLeRobotDataset()


def test_the_datasets_take_the_groups_whole(av1_root):
    streaming = StreamingLeRobotDataset(
        root=av1_root,
        streams=StreamOptions(pool_size=3, canonical_streams=4, decode_ahead=2),
        decoding=DecodeOptions(decoders_kept=5),
    )
    assert streaming.streams.pool_size == 3 and streaming.resolved_canonical_streams(1) == 4
    assert streaming.reading.settings.decode_ahead == 2 and streaming.reading.decoders.max_size == 5
    assert [source.frames.decode_ahead for source in streaming.sources] == [2]
    assert StreamingLeRobotDataset(root=av1_root).streams == StreamOptions()
    mapped = LeRobotDataset(root=av1_root, decoding=DecodeOptions(decoders_kept=9))
    assert mapped.reading.decoders.max_size == 9


def test_decode_ahead_by_default_follows_each_sources_frame_size(av1_root):
    """16 samples per decoder call while a sample's camera frames are small (3 x 256x256 RGB and under: a seek per
    16 frames), 4 above (the frames held grow with the frame size)."""
    assert default_decode_ahead(3 * 256 * 256 * 3) == 16 and default_decode_ahead(3 * 480 * 640 * 3) == 4
    # Camera files of one episode each: small frames up to 1 MiB ahead (a piece of tiny frames decoded whole).
    assert default_decode_ahead(3 * 48 * 64 * 3, own_files=True) == 37 and default_decode_ahead(3 * 48 * 64 * 3) == 16
    assert default_decode_ahead(3 * 128 * 128 * 3, own_files=True) == 16
    assert default_decode_ahead(3 * 480 * 640 * 3, own_files=True) == 4
    small = StreamingLeRobotDataset(root=av1_root)
    assert small.streams.decode_ahead is None and small.sources[0].frames.decode_ahead == 16
