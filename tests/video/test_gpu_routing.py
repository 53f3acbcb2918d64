"""Where a camera asked to decode on a GPU is decoded: NVDEC for the codecs the GPU's engine decodes, the CPU for
the others (AV1 on A100/H100/H200), reported per camera and counted. The table is tested here on its own; the
datasets' reporting on the CPU; the fallback itself on a GPU, where there is one (on this project's GPU machine:
BENCHMARKS.md "GPU decoding per camera")."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from robostream import DecodeOptions, LeRobotDataset, Mixture, Source, StreamingLeRobotDataset
from robostream.video.nvdec import Gpu, Refusals, nvdec_codecs

H100 = Gpu("cuda:0", "NVIDIA H100 80GB HBM3", (9, 0))
A100 = Gpu("cuda:0", "NVIDIA A100-SXM4-80GB", (8, 0))
L40S = Gpu("cuda:0", "NVIDIA L40S", (8, 9))
B200 = Gpu("cuda:0", "NVIDIA B200", (10, 0))


@pytest.mark.parametrize(
    "capability,av1",
    [
        ((8, 0), False),
        ((9, 0), False),
        ((7, 5), False),
        ((8, 6), True),
        ((8, 9), True),
        ((10, 0), True),
        ((12, 0), True),
    ],
)
def test_nvdec_decodes_av1_only_where_nvidias_matrix_says(capability, av1):
    codecs = nvdec_codecs(capability)
    assert {"h264", "hevc"} <= codecs
    assert ("av1" in codecs) is av1


def test_a_refusal_names_the_gpu_and_codec_and_a_probe_verdict_is_kept_per_gpu_and_codec():
    refusals = Refusals()
    for gpu in (H100, A100):
        reason = refusals.reason(gpu, "av1")
        assert reason is not None and gpu.name in reason and "av1" in reason and "compute" in reason
        assert refusals.reason(gpu, "h264") is None
    assert refusals.reason(L40S, "av1") is None and refusals.reason(B200, "av1") is None
    assert refusals.reason(H100, None) is None  # an unnamed codec: the open finds out
    stated = refusals.found(L40S, "hevc", "[Beta CUDA] Falling back due to: Video not supported")
    assert refusals.reason(L40S, "hevc") == stated and "Video not supported" in stated
    assert refusals.reason(H100, "hevc") is None  # another GPU: its own verdict


def test_gpu_fallback_takes_a_choice():
    with pytest.raises(ValueError, match=r"gpu_fallback='gpu_only': expected one of \('cpu', 'error'\)"):
        DecodeOptions(device="cuda", gpu_fallback="gpu_only")  # type: ignore[arg-type]


def test_cpu_decoding_reports_cpu_per_camera_and_counts_no_gpu_frames(av1_root):
    stream = StreamingLeRobotDataset(root=av1_root, seed=0, return_uint8=True)
    loader = DataLoader(stream, batch_size=8, num_workers=1)
    assert sum(len(batch["index"]) for batch in loader) == len(LeRobotDataset(root=av1_root))
    counts = stream.frame_counts()
    assert counts["frames_decoded"] > 0
    assert counts["frames_decoded_gpu"] == counts["frames_decoded_cpu_fallback"] == 0
    assert stream.camera_decoders() == dict.fromkeys(stream.meta.video_keys, "cpu")
    dataset = LeRobotDataset(root=av1_root, return_uint8=True)
    dataset[3]
    assert dataset.frame_counts()["frames_decoded_gpu"] == 0
    assert dataset.camera_decoders() == dict.fromkeys(dataset.meta.video_keys, "cpu")
    mixture = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=av1_root), Source(root=av1_root, episodes=[0])])
    )
    keys = [f"source {i} ({s.label}): {key}" for i, s in enumerate(mixture.sources) for key in s.meta.video_keys]
    assert mixture.camera_decoders() == dict.fromkeys(keys, "cpu") and len(keys) == 2 * len(stream.meta.video_keys)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NVDEC) and a CUDA build of torchcodec")
@pytest.mark.parametrize("fallback", ["cpu", "error"])
def test_on_a_gpu_each_camera_decodes_where_it_can_with_frames_equal_to_the_cpus(any_root, fallback):
    """On a GPU: a camera whose codec NVDEC decodes comes out of the GPU; one it cannot (AV1 on Hopper) comes out of
    the CPU with the reason (or is refused under gpu_fallback="error"); the frames are the CPU decoder's either way
    (NVDEC's colour conversion may differ by a few levels)."""
    cpu = LeRobotDataset(root=any_root, return_uint8=True)
    gpu = LeRobotDataset(root=any_root, return_uint8=True, decoding=DecodeOptions(device="cuda", gpu_fallback=fallback))
    codec = cpu.meta.info.features[cpu.meta.video_keys[0]]["info"]["video.codec"]
    decodable = codec in nvdec_codecs(torch.cuda.get_device_capability())
    if not decodable and fallback == "error":
        with pytest.raises(Exception, match=f"does not decode {codec}"):
            gpu[0]
        return
    for position in (0, len(cpu) // 2, len(cpu) - 1):
        mine, theirs = gpu[position], cpu[position]
        for key in cpu.meta.video_keys:
            assert mine[key].device.type == ("cuda" if decodable else "cpu")
            assert np.abs(mine[key].cpu().int().numpy() - theirs[key].int().numpy()).max() <= 8
    where = gpu.camera_decoders()
    assert all(
        w.startswith("cuda") if decodable else w.startswith("cpu (GPU fallback: NVDEC on") for w in where.values()
    )
    counts = gpu.frame_counts()
    assert counts["frames_decoded_gpu" if decodable else "frames_decoded_cpu_fallback"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NVDEC) and a CUDA build of torchcodec")
def test_on_a_gpu_the_streaming_batches_hold_the_cpus_frames(any_root):
    """The streaming loader's batch path on a GPU (whole batches assembled from frames decoded there, or on the CPU
    for a codec the GPU lacks): every sample once, frames as the CPU decoder gives them."""
    cpu = {int(s["index"]): s for s in StreamingLeRobotDataset(root=any_root, seed=0, return_uint8=True)}
    gpu = StreamingLeRobotDataset(root=any_root, seed=0, return_uint8=True, decoding=DecodeOptions(device="cuda"))
    seen = 0
    for batch in DataLoader(gpu, batch_size=8, num_workers=0):
        for row, index in enumerate(batch["index"].tolist()):
            for key in gpu.meta.video_keys:
                mine = batch[key][row].cpu().int()
                assert np.abs(mine.numpy() - cpu[index][key].int().numpy()).max() <= 8
            seen += 1
    assert seen == len(cpu)
    counts = gpu.frame_counts()
    assert counts["frames_decoded_gpu"] + counts["frames_decoded_cpu_fallback"] == counts["frames_decoded"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NVDEC) and a CUDA build of torchcodec")
def test_on_a_gpu_decoders_opened_in_one_thread_serve_the_camera_threads_at_once(h264_root):
    """Seen on an H100: GPU decoders opened by one thread, then called by two camera threads at once, crashed the
    process (segfault in torchcodec); a process's calls into its GPU decoders are serialised."""
    gpu = LeRobotDataset(root=h264_root, return_uint8=True, decoding=DecodeOptions(device="cuda"))
    assert set(gpu.camera_decoders().values()) == {"cuda:0"}  # every camera's decoder opened here, in this thread
    for position in range(0, len(gpu), 3):
        assert all(gpu[position][key].device.type == "cuda" for key in gpu.meta.video_keys)
