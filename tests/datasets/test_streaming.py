import itertools
import json

import pytest
import torch
from torch.utils.data import DataLoader

from robostream import LeRobotDataset, StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.format.metadata import load_metadata
from robostream.plan.state import state_checksum
from robostream.synth import SynthConfig, generate, read_marker


def _ids(samples):
    return [int(s["index"]) for s in samples]


def _batch_ids(batches):
    return [i for b in batches for i in b["index"].tolist()]


@pytest.mark.parametrize("deltas", [None, "windows"])
def test_streaming_samples_equal_map_style_samples(av1_root, deltas):
    meta = load_metadata(av1_root)
    if deltas:
        fps = meta.fps
        deltas = {
            meta.video_keys[0]: [-10 / fps, -5 / fps, 0.0],
            meta.video_keys[1]: [0.0, 1 / fps],
            "action": [k / fps for k in range(-3, 120)],
        }
    stream = StreamingLeRobotDataset(root=av1_root, delta_timestamps=deltas, return_uint8=True, seed=7)
    reference = LeRobotDataset(root=av1_root, delta_timestamps=deltas, return_uint8=True)
    seen = []
    for sample in stream:
        expected = reference[int(sample["index"])]
        assert sample.keys() == expected.keys()
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == sample[key].dtype and torch.equal(value, sample[key]), key
            else:
                assert value == sample[key]
        frame = sample[meta.video_keys[1]][0] if deltas else sample[meta.video_keys[1]]
        assert read_marker(frame.numpy()) == (int(sample["episode_index"]), int(sample["frame_index"]), 1)
        seen.append(int(sample["index"]))
    assert sorted(seen) == list(range(len(reference)))  # one process: every sample once, no padding
    assert seen != sorted(seen)


def test_epoch_order_is_deterministic_and_changes_with_set_epoch(av1_root):
    a = StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True)
    first = _ids(a)
    assert _ids(StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True)) == first
    a.set_epoch(1)
    second = _ids(a)
    assert set(second) == set(first) and second != first


def test_unshuffled_single_consumer_is_chronological(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, shuffle=False, episodes=[1, 4, 5])
    meta = dataset.meta
    expected = [i for e in (1, 4, 5) for i in range(int(meta.episodes.from_index[e]), int(meta.episodes.to_index[e]))]
    assert _ids(dataset) == expected


@pytest.mark.parametrize("uneven", ["pad", "drop"])
def test_ranks_and_workers_split_the_epoch(av1_root, uneven):
    """2 ranks x 2 real worker processes: disjoint, complete (pad) and equal per rank."""
    per_rank = []
    for rank in range(2):
        dataset = StreamingLeRobotDataset(
            root=av1_root, rank=rank, world_size=2, streams=StreamOptions(uneven=uneven), return_uint8=True
        )
        loader = DataLoader(dataset, batch_size=5, num_workers=2)
        per_rank.append(_batch_ids(loader))
    total = len(LeRobotDataset(root=av1_root))
    assert len(per_rank[0]) == len(per_rank[1])
    union = per_rank[0] + per_rank[1]
    if uneven == "drop":
        assert len(set(union)) == len(union) and total - len(union) < 12  # at most one sample per stream dropped
    else:
        assert set(union) == set(range(total)) and len(union) - total < 12  # at most one repeat per stream


def test_one_rank_reads_every_sample_exactly_once(av1_root):
    for uneven in ("pad", "drop"):
        ids, _ = _run({"streams": StreamOptions(uneven=uneven)}, av1_root, num_workers=2, batch_size=5)
        assert sorted(ids) == list(range(len(LeRobotDataset(root=av1_root))))


def _run(dataset_kwargs, root, batches=None, state=None, num_workers=2, batch_size=4, rank=0, world=1):
    dataset = StreamingLeRobotDataset(root=root, rank=rank, world_size=world, return_uint8=True, **dataset_kwargs)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)))
    out = []
    for batch in itertools.islice(loader, batches):
        out.append(batch)
    return _batch_ids(out), loader.state_dict()


@pytest.mark.parametrize("uneven", ["pad", "drop"])
def test_exact_resume_through_worker_processes(av1_root, uneven):
    kwargs = {"seed": 11, "streams": StreamOptions(pool_size=3, uneven=uneven)}
    full, _ = _run(kwargs, av1_root)
    for stop in (1, 7, 12):
        head, state = _run(kwargs, av1_root, batches=stop)
        assert len(json.dumps(state)) < 600
        tail, _ = _run(kwargs, av1_root, state=state)
        assert head + tail == full, f"resume after {stop} batches"


def test_chained_resumes_are_exact(av1_root):
    kwargs = {"seed": 12, "streams": StreamOptions(pool_size=2)}
    full, _ = _run(kwargs, av1_root, num_workers=2, batch_size=3)
    seen, state = [], None
    for _ in range(3):
        ids, state = _run(kwargs, av1_root, batches=5, state=state, num_workers=2, batch_size=3)
        seen += ids
    rest, final = _run(kwargs, av1_root, state=state, num_workers=2, batch_size=3)
    assert seen + rest == full
    assert sum(final["quota_left"]) == 0


def test_resume_in_process_without_workers(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, seed=5)
    full = _ids(dataset)
    dataset = StreamingLeRobotDataset(root=av1_root, seed=5)
    head = _ids(itertools.islice(iter(dataset), 23))
    state = dataset.state_dict()
    resumed = StreamingLeRobotDataset(root=av1_root, seed=5)
    resumed.load_state_dict(state)
    assert head + _ids(resumed) == full


@pytest.mark.parametrize(
    "before,after",
    [((2, 2), (1, 2)), ((1, 2), (1, 3)), ((2, 2), (1, 3)), ((2, 2), (1, 5)), ((3, 4), (1, 7)), ((1, 3), (1, 2))],
)
def test_elastic_resume_repeats_and_skips_nothing(av1_root, before, after):
    """(world, workers) before -> after: what ran before plus what runs after is the epoch, each sample once."""
    (world, workers), (new_world, new_workers) = before, after
    kwargs = {"seed": 2, "streams": StreamOptions(uneven="drop")}
    consumed, states = [], []
    for rank in range(world):
        ids, state = _run(kwargs, av1_root, batches=3, num_workers=workers, rank=rank, world=world)
        consumed += ids
        states.append(state)
    assert all(s == states[0] for s in states)  # any rank's state describes the whole job
    for rank in range(new_world):
        ids, _ = _run(kwargs, av1_root, state=states[0], num_workers=new_workers, rank=rank, world=new_world)
        consumed += ids
    assert len(consumed) == len(set(consumed)), "a sample was repeated"
    # One rank after the resume: nothing to equalise, so the epoch completes with every sample exactly once.
    assert sorted(consumed) == list(range(len(LeRobotDataset(root=av1_root))))


def test_bad_resume_states_are_refused(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, seed=1)
    state = dataset.state_dict()
    with pytest.raises(ValueError, match="seed=1 .* seed=2"):
        StreamingLeRobotDataset(root=av1_root, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        dataset.load_state_dict(dict(state, version=99))
    rows = state["segments"]
    edited = dict(state, segments=[rows[0], [rows[1][0], 0, 10**6, 0, 0]] + rows[2:])
    with pytest.raises(ValueError, match="checksum .* does not match its content; the state was edited"):
        dataset.load_state_dict(edited)

    def signed(**edit):  # what the numbers alone must refuse: an edited state with the checksum of its content
        body = {k: v for k, v in state.items() if k != "checksum"} | edit
        return body | {"checksum": state_checksum(body)}

    with pytest.raises(ValueError, match=r"segment row 1: needs 0 <= lo < hi"):
        dataset.load_state_dict(signed(segments=[rows[0], [rows[1][0], 0, 10**6, 0, 0]] + rows[2:]))
    with pytest.raises(ValueError, match=r"segment row 3: owner 7 is not in \[0, 1\)"):
        dataset.load_state_dict(signed(segments=rows[:3] + [rows[3][:3] + [7, rows[3][4]]] + rows[4:]))
    with pytest.raises(ValueError, match="quota_left must be a list of 1 non-negative integers"):
        dataset.load_state_dict(signed(quota_left=[1, 2]))


@pytest.fixture(scope="module")
def long_episodes(tmp_path_factory):
    """Episodes of ~200 frames at 20 fps like the sample dataset, one small camera (sarm spans 7 s)."""
    config = SynthConfig(
        episodes=6, cameras=1, height=48, width=64, fps=20, episode_length=200, state_dim=4, video_file_mb=0.2, seed=9
    )
    return generate(tmp_path_factory.mktemp("long") / "ds", config)


@pytest.mark.parametrize("mode,limit", [("single", 1.1), ("sarm", 0.2)])
def test_each_frame_is_decoded_about_once(long_episodes, mode, limit):
    from robostream.bench.modes import mode_delta_timestamps

    deltas = mode_delta_timestamps(mode, ["observation.images.cam0"], state_key=None)
    dataset = StreamingLeRobotDataset(
        root=long_episodes, delta_timestamps=deltas, return_uint8=True, streams=StreamOptions(canonical_streams=2)
    )
    count = sum(1 for _ in dataset)
    stats = dataset.frame_counts()
    window = len(deltas["observation.images.cam0"]) if deltas else 1
    assert stats["frames_delivered"] == count * window
    assert stats["frames_decoded"] / stats["frames_delivered"] <= limit, stats


def test_frame_counters_add_up_over_worker_processes(av1_root):
    meta = load_metadata(av1_root)
    deltas = {meta.video_keys[0]: [-0.1, 0.0]}
    dataset = StreamingLeRobotDataset(root=av1_root, delta_timestamps=deltas, return_uint8=True)
    samples = sum(len(b["index"]) for b in DataLoader(dataset, batch_size=6, num_workers=2))
    counts = dataset.frame_counts()
    assert counts["frames_delivered"] == samples * (2 + 1)
    assert samples * 2 <= counts["frames_decoded"] < counts["frames_delivered"]
    assert 0 < counts["peak_piece_frames"] <= counts["peak_live_frames"]
