"""`robostream inspect`: what a user wants to know first about a dataset, and whether its files are all there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av

from robostream.errors import MissingFileError, VideoDecodeError
from robostream.format.metadata import DatasetMetadata, load_metadata

GOP_PROBE_PACKETS = 300


def probe_video(source: Any, name: str) -> dict[str, Any]:
    """Codec, resolution, pixel format, frame count and GOP (largest keyframe distance in the first packets)."""
    path = name
    try:
        with av.open(source) as container:
            stream = container.streams.video[0]
            keyframes = []
            for i, packet in enumerate(container.demux(stream)):
                if i >= GOP_PROBE_PACKETS or packet.dts is None:
                    break
                if packet.is_keyframe:
                    keyframes.append(i)
            gaps = [b - a for a, b in zip(keyframes, keyframes[1:])]
            return {
                "codec": stream.codec_context.codec.canonical_name,
                "width": stream.width,
                "height": stream.height,
                "pix_fmt": stream.codec_context.pix_fmt,
                "frames": int(stream.frames),
                "gop": max(gaps) if gaps else None,
            }
    except (av.error.FFmpegError, IndexError) as exc:
        raise VideoDecodeError(f"{path}: cannot be read as a video: {exc}") from exc


def describe(root: str | Path) -> dict[str, Any]:
    """A dict summary of the dataset; raises a clear error when metadata or a referenced file is broken."""
    meta = load_metadata(root)
    episodes = meta.episodes
    data_files = sorted({meta.data_file(int(e)) for e in episodes.episode_index})
    summary: dict[str, Any] = {
        "root": str(meta.root),
        "codebase_version": meta.info.codebase_version,
        "fps": meta.fps,
        "robot_type": meta.info.robot_type,
        "episodes": len(episodes),
        "frames": int(episodes.length.sum()),
        "tasks": len(meta.tasks),
        "data_files": len(data_files),
        "data_bytes": sum(_size(meta, f, "data file") for f in data_files),
        "features": {k: {"dtype": f["dtype"], "shape": f["shape"]} for k, f in meta.info.features.items()},
        "cameras": {},
    }
    for key in meta.video_keys:
        files = sorted({meta.video_file(int(e), key) for e in episodes.episode_index})
        info = probe_video(meta.open(files[0], what=f"video of camera {key!r}"), meta.describe(files[0]))
        info.update(files=len(files), bytes=sum(_size(meta, f, f"video of camera {key!r}") for f in files))
        summary["cameras"][key] = info
    for key in meta.info.image_keys:
        summary["cameras"][key] = {
            "codec": "png (in parquet)",
            "height": meta.info.features[key]["shape"][0],
            "width": meta.info.features[key]["shape"][1],
        }
    return summary


def _size(meta: DatasetMetadata, relative: str, what: str) -> int:
    try:
        return meta.data_storage.size(relative, what=what)
    except FileNotFoundError as exc:
        raise MissingFileError(f"{meta.describe(relative)}: {what} listed in the episode table is missing") from exc


def render(summary: dict[str, Any]) -> str:
    """Plain-text rendering of `describe`'s summary."""
    mb = 1024 * 1024
    lines = [
        f"{summary['root']}",
        f"  version {summary['codebase_version']}  fps {summary['fps']}  robot {summary['robot_type']}",
        f"  {summary['episodes']} episodes, {summary['frames']} frames "
        f"({summary['frames'] / summary['fps'] / 60:.1f} min), {summary['tasks']} tasks",
        f"  data: {summary['data_files']} parquet file(s), {summary['data_bytes'] / mb:.1f} MiB",
        "  features:",
    ]
    for name, feat in summary["features"].items():
        lines.append(f"    {name:<32} {feat['dtype']:<8} {feat['shape']}")
    if summary["cameras"]:
        lines.append("  cameras:")
    for key, cam in summary["cameras"].items():
        detail = f"    {key:<32} {cam['codec']} {cam['width']}x{cam['height']}"
        if "files" in cam:
            detail += f" {cam['pix_fmt']} gop {cam['gop']}, {cam['files']} file(s), {cam['bytes'] / mb:.1f} MiB"
        lines.append(detail)
    return "\n".join(lines)
