"""Produce one output file of the conversion from its episodes' v2.1 files, as lerobot 0.6.1 writes it.

- Data: lerobot reads each episode parquet with pandas, concatenates and writes with `to_parquet(index=False)`,
  which turns the recorder's fixed-size lists into variable-size `list<...>` columns (image columns keep HF's
  `struct<bytes, path>`), snappy, default row groups. The same table is built here with Arrow alone (no pandas
  object columns: ~10x less memory), so columns, types and values are equal; the schema metadata is not
  (no `pandas` entry, which no LeRobot reader uses).
- Video: lerobot remuxes the episode mp4s through FFmpeg's concat demuxer into one mp4 (stream copy,
  `movflags=faststart`, packets without dts dropped). The same PyAV calls are made here, so the packet lists
  (pts, dts, flags, bytes) are equal.
"""

from __future__ import annotations

import os
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.durable import fsync_file
from robostream.errors import DatasetFormatError

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _variable_lists(typ: pa.DataType) -> pa.DataType:
    """The type pandas' round trip gives: fixed-size lists become lists, recursively."""
    if pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return pa.list_(_variable_lists(typ.value_type))
    return typ


def output_schema(schema: pa.Schema, image_keys: list[str]) -> pa.Schema:
    fields = []
    for field in schema:
        typ = IMAGE_TYPE if field.name in image_keys else _variable_lists(field.type)
        fields.append(pa.field(field.name, typ))
    return pa.schema(fields)


def check_unchanged(inputs: list[tuple[Path, int]]) -> None:
    """Refuse input files whose size differs from the one recorded at planning (changed during the job)."""
    for path, size in inputs:
        actual = os.path.getsize(path)  # FileNotFoundError names the path
        if actual != size:
            raise DatasetFormatError(
                f"{path}: {actual} bytes, but {size} when the job was planned; the input changed "
                "during the job: remove the work dir and start again"
            )


def write_data_file(inputs: list[Path], output: Path, image_keys: list[str]) -> int:
    """Concatenate episode parquet files into `output`; returns the bytes written (fsynced)."""
    tables = []
    schema = None
    for path in inputs:
        try:
            table = pq.read_table(path, use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(f"{path}: not a readable parquet file: {exc}") from exc
        target = output_schema(table.schema, image_keys)
        if schema is None:
            schema = target
        elif target != schema:
            raise DatasetFormatError(
                f"{path}: columns {target} differ from {inputs[0]}'s {schema}; every episode "
                "parquet of a dataset must have the same columns and types"
            )
        tables.append(table.cast(schema))
    pq.write_table(pa.concat_tables(tables), output, compression="snappy")
    return fsync_file(output)


def write_video_file(inputs: list[Path], output: Path) -> int:
    """Concatenate episode mp4s of one camera into `output` by stream copy; returns the bytes written (fsynced)."""
    listing = output.with_name(output.name + ".ffconcat")
    with listing.open("w") as handle:
        handle.write("ffconcat version 1.0\n")
        for path in inputs:
            quoted = str(Path(path).resolve()).replace("'", "'\\''")  # ffconcat's escape for a quote
            handle.write(f"file '{quoted}'\n")
    try:
        source = av.open(str(listing), mode="r", format="concat", options={"safe": "0"})
    except av.error.FFmpegError as exc:
        raise DatasetFormatError(f"cannot open episode videos {inputs[0]} .. {inputs[-1]} for concatenation: {exc}")
    try:
        with av.open(str(output), mode="w", format="mp4", options={"movflags": "faststart"}) as sink:
            streams = {}
            for stream in source.streams:
                if stream.type in ("video", "audio", "subtitle"):
                    streams[stream.index] = sink.add_stream_from_template(template=stream, opaque=True)
                    streams[stream.index].time_base = stream.time_base
            for packet in source.demux():
                if packet.stream.index not in streams or packet.dts is None:
                    continue
                packet.stream = streams[packet.stream.index]
                sink.mux(packet)
    except av.error.FFmpegError as exc:
        raise DatasetFormatError(f"concatenating {inputs[0]} .. {inputs[-1]} failed: {exc}") from exc
    finally:
        source.close()
        listing.unlink()
    return fsync_file(output)
