"""Mixtures of datasets: exact per-source counts, samples equal to each source's own, every single-dataset property
(order, split, resume) kept, and features never dropped silently."""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from robostream import LeRobotDataset, Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.synth import SynthConfig, episode_lengths, generate
from tests.datasets.elastic_parts import torchrun_part

SMALL = dict(height=64, width=64, codec="h264", gop=10, data_file_mb=0.01, video_file_mb=0.04)
# Three datasets of different sizes, episode lengths, frame rates and tasks (task strings follow the episode),
# and one that differs in cameras and state size.
CONFIGS = {
    "a": SynthConfig(episodes=5, cameras=2, fps=20, episode_length=20, state_dim=6, seed=1, **SMALL),
    "b": SynthConfig(episodes=3, cameras=2, fps=10, episode_length=30, state_dim=6, seed=2, **SMALL),
    "c": SynthConfig(episodes=8, cameras=2, fps=20, episode_length=12, state_dim=6, seed=3, **SMALL),
    "other": SynthConfig(episodes=3, cameras=3, fps=20, episode_length=10, state_dim=4, seed=4, **SMALL),
}
# "other" under names of its own where it differs (its third camera; 4-d state and action)
RENAME = {
    "observation.images.cam2": "observation.images.extra",
    "observation.state": "observation.state4",
    "action": "action4",
}
WINDOWS = {"observation.state": [-0.1, 0.0], "observation.images.cam0": [-0.1, 0.0]}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("mixture")
    return {name: generate(base / name, config) for name, config in CONFIGS.items()}


def _lengths(name: str) -> list[int]:
    return episode_lengths(CONFIGS[name])  # synth varies episode lengths around episode_length


def _key(sample) -> tuple[int, int]:
    return int(sample["dataset_index"]), int(sample["index"])


def _equal(a, b) -> bool:
    if a.keys() != b.keys():
        return False
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


@pytest.mark.parametrize(
    "weights,epoch_size,expected",
    [
        ([{"proportion": 0.5}, {"proportion": 0.3}, {"proportion": 0.2}], 301, [151, 90, 60]),
        ([{"choose": 130}, {"choose": 20}, {"choose": 96}], None, [130, 20, 96]),
        ([{"repeat": 2.5}, {}, {"repeat": 0.5}], None, [267, 84, 47]),
    ],
    ids=["proportion", "choose", "repeat"],
)
def test_exact_counts_full_passes_and_no_repeat_inside_the_partial_pass(roots, weights, epoch_size, expected):
    sources = [Source(root=roots[k], **w) for k, w in zip("abc", weights)]
    dataset = StreamingLeRobotDataset(mixture=Mixture(sources=sources, epoch_size=epoch_size), seed=3)
    assert dataset.samples_per_source == expected
    keys = [_key(s) for s in dataset]
    counts = collections.Counter(s for s, _ in keys)
    assert [counts[s] for s in range(3)] == expected
    for s, name in enumerate("abc"):
        seen = collections.Counter(i for d, i in keys if d == s)
        lengths = _lengths(name)
        passes, rest = divmod(expected[s], sum(lengths))
        # every sample `passes` times, and the partial pass's samples once more (never twice in one pass)
        assert set(seen.values()) <= {passes, passes + 1}
        assert sum(1 for n in seen.values() if n == passes + 1) == rest
        assert len(seen) == (sum(lengths) if passes else rest)
        if rest:  # a partial pass is whole episodes plus one run of the next: at most one episode cut
            starts = np.cumsum([0, *lengths])
            partial = [i for i, n in seen.items() if n == passes + 1]
            touched = collections.Counter(int(np.searchsorted(starts, i, side="right")) - 1 for i in partial)
            assert sum(1 for e, n in touched.items() if n < lengths[e]) <= 1


def test_samples_equal_each_sources_own_map_style_samples(roots):
    sources = [Source(root=roots["a"], choose=40), Source(root=roots["b"]), Source(root=roots["c"], repeat=0.5)]
    dataset = StreamingLeRobotDataset(mixture=Mixture(sources=sources), delta_timestamps=WINDOWS, seed=1)
    maps = [LeRobotDataset(root=roots[k], delta_timestamps=WINDOWS) for k in "abc"]
    samples = list(dataset)
    assert len(samples) == 40 + 84 + 47
    for sample in samples[::3]:
        assert sample["dataset_index"].dtype == torch.int64 and sample["dataset_index"].dim() == 0
        own = maps[int(sample["dataset_index"])][int(sample["index"])]  # lerobot's contract, checked elsewhere
        assert _equal({k: v for k, v in sample.items() if k != "dataset_index"}, own)
    # source b runs at 10 fps: -0.1 s is one frame back there, two at 20 fps
    b = next(s for s in samples if int(s["dataset_index"]) == 1 and int(s["frame_index"]) == 5)
    assert b["observation.state"].shape == (2, 6)
    assert torch.equal(b["timestamp"], torch.tensor(0.5))


def test_order_is_a_function_of_seed_and_epoch_and_sampling_balanced_or_fixed(roots):
    def run(seed, epoch, method):
        sources = [Source(root=roots["a"], choose=30), Source(root=roots["c"], choose=50)]
        dataset = StreamingLeRobotDataset(mixture=Mixture(sources=sources, sampling_method=method), seed=seed)
        dataset.set_epoch(epoch)
        return [_key(s) for s in dataset]

    assert run(0, 0, "balanced") == run(0, 0, "balanced")
    assert run(0, 0, "balanced") != run(1, 0, "balanced")
    assert set(run(0, 0, "balanced")) != set(run(0, 1, "balanced"))  # a new subset every epoch
    assert set(run(0, 0, "fixed")) == set(run(0, 1, "fixed"))  # the same subset, in another order
    assert run(0, 0, "fixed") != run(0, 1, "fixed")


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_batches_are_the_collate_of_the_samples(roots, workers):
    sources = [
        Source(root=roots["a"], choose=30),
        Source(root=roots["b"], choose=25),
        Source(root=roots["other"], feature_map=RENAME),
    ]
    kwargs = dict(
        mixture=Mixture(sources=sources, features="union"),
        delta_timestamps=WINDOWS,
        seed=5,
        streams=StreamOptions(pool_size=2, canonical_streams=12),
    )
    samples = list(StreamingLeRobotDataset(**kwargs))
    loader = StreamingDataLoader(StreamingLeRobotDataset(**kwargs), batch_size=7, num_workers=workers)
    batches = list(loader)
    # worker w yields its role's samples: rebuild the per-sample batches in the loader's order
    per_role = []
    for role in range(max(1, workers)):
        ds = StreamingLeRobotDataset(**kwargs)
        plan = ds.epoch_plan(1, max(1, workers))
        from robostream.datasets.epoch_iterator import EpochIterator

        it = EpochIterator(
            plan,
            role=role,
            worker=0,
            sources=ds.sources,
            schema=ds.schema,
            mixture_batches=None,
            reading=ds.reading,
            seed=ds.seed,
            epoch=0,
            pool_size=2,
            prefetch_pieces=0,
        )
        mine = list(it)
        per_role.append(
            [
                default_collate(mine[i : i + 7]) | {"task": [s["task"] for s in mine[i : i + 7]]}
                for i in range(0, len(mine), 7)
            ]
        )
    expected = [b for group in itertools.zip_longest(*per_role) for b in group if b is not None]
    assert len(batches) == len(expected)
    assert sum(len(b["index"]) for b in batches) == len(samples) == 30 + 25 + 27
    for got, want in zip(batches, expected):
        assert list(got) == list(want)
        for key in want:
            if isinstance(want[key], torch.Tensor):
                assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
            else:
                assert got[key] == want[key], key


def test_strict_features_name_the_key_and_the_sources(roots):
    renamed = {"observation.state": "observation.state4", "action": "action4"}
    with pytest.raises(
        ValueError,
        match=r"is in source \S*other but not in source \S*a \(it lacks \[.*"
        r"'observation.images.cam2'\]\).*features='union'",
    ):
        StreamingLeRobotDataset(
            mixture=Mixture(sources=[Source(root=roots["a"]), Source(root=roots["other"], feature_map=renamed)])
        )
    with pytest.raises(
        ValueError,
        match=r"feature 'observation.state' is a column of dtype float32 and shape \[6\]"
        r" in source .*a.* but .* shape \[4\] in source .*other",
    ):
        StreamingLeRobotDataset(
            mixture=Mixture(sources=[Source(root=roots["a"]), Source(root=roots["other"])], features="union")
        )
    with pytest.raises(ValueError, match="feature_map renames \\['nope'\\]"):
        StreamingLeRobotDataset(mixture=Mixture(sources=[Source(root=roots["a"], feature_map={"nope": "x"})]))
    with pytest.raises(ValueError, match="relative weights"):
        StreamingLeRobotDataset(
            mixture=Mixture(sources=[Source(root=roots["a"], proportion=1), Source(root=roots["b"])])
        )


def test_feature_map_and_union_fill_missing_keys_with_zeros_and_pad(roots):
    sources = [Source(root=roots["a"], choose=20), Source(root=roots["other"], feature_map=RENAME, choose=20)]
    dataset = StreamingLeRobotDataset(
        mixture=Mixture(sources=sources, features="union"), delta_timestamps=WINDOWS, seed=2
    )
    samples = list(dataset)
    a = next(s for s in samples if int(s["dataset_index"]) == 0)
    other = next(s for s in samples if int(s["dataset_index"]) == 1)
    assert list(a) == list(other)  # one key set, one order
    assert torch.equal(a["observation.images.extra"], torch.zeros(3, 64, 64)) and a["observation.images.extra_is_pad"]
    assert not other["observation.images.extra_is_pad"] and other["observation.images.extra"].abs().sum() > 0
    # a windowed key a source lacks: zeros of the window's shape, every frame marked as padding
    assert other["observation.state"].shape == (2, 6) and other["observation.state_is_pad"].all()
    assert not other["observation.state"].any()
    assert other["observation.state4"].shape == (4,) and a["observation.state4"].shape == (4,)
    assert a["observation.state4_is_pad"] and not other["observation.state4_is_pad"]
    own = LeRobotDataset(root=roots["other"])[int(other["index"])]
    assert torch.equal(other["observation.images.extra"], own["observation.images.cam2"])
    assert torch.equal(other["observation.state4"], own["observation.state"])
    assert set(dataset.source_stats(1)) >= {"observation.state4", "observation.images.extra"}


def _loader(sources, workers=2, epoch_size=None):
    dataset = StreamingLeRobotDataset(
        mixture=Mixture(sources=sources, epoch_size=epoch_size),
        seed=4,
        streams=StreamOptions(pool_size=2),
        return_uint8=True,
    )
    return StreamingDataLoader(dataset, batch_size=4, num_workers=workers)


def _ids(batches):
    return [(int(d), int(i)) for b in batches for d, i in zip(b["dataset_index"], b["index"])]


def test_exact_resume_and_a_changed_mixture_refused(roots):
    sources = [
        Source(root=roots["a"], proportion=2),
        Source(root=roots["b"], proportion=1),
        Source(root=roots["c"], proportion=1),
    ]
    whole = _ids(_loader(sources, epoch_size=150))
    first = _loader(sources, epoch_size=150)
    head = _ids(itertools.islice(first, 9))
    state = json.loads(json.dumps(first.state_dict()))
    second = _loader(sources, epoch_size=150)
    second.load_state_dict(state)
    assert head + _ids(second) == whole
    changed = _loader(sources, epoch_size=160)
    with pytest.raises(ValueError, match="mixture .* cannot continue .* on_mixture_change='next_epoch'"):
        changed.load_state_dict(state)
    reweighted = [Source(root=roots["a"], proportion=1), *sources[1:]]
    with pytest.raises(ValueError, match="cannot continue"):
        _loader(reweighted, epoch_size=150).load_state_dict(state)
    changed.streaming_dataset.load_state_dict(state, on_mixture_change="next_epoch")
    assert changed.streaming_dataset.epoch == 1 and len(_ids(changed)) == 160
    with pytest.raises(ValueError, match="one dataset"):
        StreamingLeRobotDataset(root=roots["a"]).load_state_dict(state)


@pytest.mark.parametrize("batching", ["random", "per_stream", "stratified"])
def test_elastic_resume_of_a_mixture_from_2x2_to_1x3_undertorchrun_part(roots, tmp_path, batching):
    """2 ranks x 2 workers for a few steps, then 1 rank x 3 workers to the end: together exactly the samples of an
    uninterrupted run (a source upsampled 1.5x: its repeats included), up to one padding sample per consumer (per
    source with per_stream and stratified). per_stream: at every step both ranks' batches come from one and the
    same source; stratified: every batch draws on every source."""
    sources = [
        {"root": str(roots["a"]), "repeat": 1.5},
        {"root": str(roots["b"]), "choose": 40},
        {"root": str(roots["c"])},
    ]
    spec = tmp_path / "mixture.json"
    spec.write_text(json.dumps({"sources": sources, "batching": batching}))
    lanes = {"batching": batching, "batch_size": 3} if batching != "random" else {}
    uninterrupted = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(**s) for s in sources], **lanes),
        seed=7,
        streams=StreamOptions(pool_size=2),
        return_uint8=True,
    )
    expected = collections.Counter(_key(s) for s in uninterrupted)
    head = torchrun_part(spec, tmp_path / "head", 2, 2, batches=5, state_file="-")
    assert all(r["state"] == head[0]["state"] for r in head)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(head[0]["state"]))
    tail = torchrun_part(spec, tmp_path / "tail", 1, 3, batches=-1, state_file=state)
    got = collections.Counter(tuple(i) for r in head + tail for i in r["ids"])
    assert not expected - got, "a sample was skipped"
    extra = got - expected
    assert sum(extra.values()) <= (4 + 3) * (3 if batching != "random" else 1), f"more than padding: {extra}"
    if batching == "per_stream":
        assert head[0]["batch_sources"] == head[1]["batch_sources"]  # one source per global batch
        assert all(len(s) == 1 for r in head + tail for s in r["batch_sources"])
        assert len({s[0] for r in head + tail for s in r["batch_sources"]}) == 3


def test_per_stream_batches_hold_one_source_and_resume_exactly(roots):
    sources = [
        Source(root=roots["a"], choose=50),
        Source(root=roots["b"]),
        Source(root=roots["other"], repeat=2),
    ]  # other differs in cameras and state size: allowed here

    def loader(workers=2):
        dataset = StreamingLeRobotDataset(
            mixture=Mixture(sources=sources, batching="per_stream", batch_size=8),
            seed=3,
            return_uint8=True,
            delta_timestamps=WINDOWS,
        )
        return StreamingDataLoader(dataset, batch_size=8, num_workers=workers)

    whole = list(loader())
    assert [len(set(b["dataset_index"].tolist())) for b in whole] == [1] * len(whole)
    by_source = collections.Counter(_key(s) for b in whole for s in _rows(b))
    assert collections.Counter(d for d, _ in by_source.elements()) == {0: 50, 1: 84, 2: 54}
    other = next(b for b in whole if int(b["dataset_index"][0]) == 2)
    assert other["observation.state"].shape[1:] == (2, 4) and "observation.images.cam2" in other
    assert sum(len(b["index"]) < 8 for b in whole) <= 3 * 2  # only a lane's last batch in a worker is short
    first = loader()
    head = [_key(s) for b in itertools.islice(first, 7) for s in _rows(b)]
    state = json.loads(json.dumps(first.state_dict()))
    second = loader()
    second.load_state_dict(state)
    assert head + [_key(s) for b in second for s in _rows(b)] == [_key(s) for b in whole for s in _rows(b)]
    with pytest.raises(ValueError, match="plans batching=.per_stream. for batch_size=8"):
        StreamingDataLoader(second.streaming_dataset, batch_size=4)
    with pytest.raises(ValueError, match="features='union' applies to batching='random'"):
        Mixture(sources=sources, batching="per_stream", batch_size=8, features="union")
    with pytest.raises(ValueError, match="needs batch_size="):
        Mixture(sources=sources, batching="per_stream")


def test_stratified_batches_hold_each_sources_share_and_resume_exactly(roots):
    sources = [Source(root=roots["a"], choose=48), Source(root=roots["b"]), Source(root=roots["c"], repeat=2)]

    def loader(workers=2):
        dataset = StreamingLeRobotDataset(
            mixture=Mixture(sources=sources, batching="stratified", batch_size=8),
            seed=3,
            return_uint8=True,
            delta_timestamps=WINDOWS,
        )
        return StreamingDataLoader(dataset, batch_size=8, num_workers=workers)

    whole = list(loader())
    by_source = collections.Counter(_key(s) for b in whole for s in _rows(b))
    totals = collections.Counter(d for d, _ in by_source.elements())
    assert totals == {0: 48, 1: 84, 2: 2 * sum(_lengths("c"))}
    shares = {d: 8 * n / sum(totals.values()) for d, n in totals.items()}  # each worker's shares are close to these
    full = [collections.Counter(b["dataset_index"].tolist()) for b in whole if len(b["index"]) == 8]
    assert len(full) >= len(whole) - 2  # only each worker's last batch is short
    assert all(abs(batch[d] - share) < 1.5 for batch in full for d, share in shares.items()), (shares, full[:4])
    first = loader()
    head = [_key(s) for b in itertools.islice(first, 7) for s in _rows(b)]
    state = json.loads(json.dumps(first.state_dict()))
    second = loader()
    second.load_state_dict(state)
    assert head + [_key(s) for b in second for s in _rows(b)] == [_key(s) for b in whole for s in _rows(b)]
    with pytest.raises(ValueError, match="plans batching=.stratified. for batch_size=8"):
        StreamingDataLoader(second.streaming_dataset, batch_size=4)
    per_stream = StreamingLeRobotDataset(mixture=Mixture(sources=sources, batching="per_stream", batch_size=8), seed=3)
    with pytest.raises(ValueError, match="cannot continue with .* batching or batch_size"):
        per_stream.load_state_dict(state)  # one state shape: the mixture's identity tells them apart
    with pytest.raises(ValueError, match="batching='stratified' needs batch_size="):
        Mixture(sources=sources, batching="stratified")


def _rows(batch):
    return [{"dataset_index": d, "index": i} for d, i in zip(batch["dataset_index"], batch["index"])]
