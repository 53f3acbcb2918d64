"""Logical comparison of two datasets' files: what "the same conversion output" means.

Bytes are not compared (library versions change parquet footers and mp4 tags); instead: the same file set; parquet
column names, types, row counts and values; mp4 packet lists (pts, dts, keyframe flag, bytes) and time base; JSON
documents parsed. Returns the differences, each naming the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import av
import pyarrow.parquet as pq


def packet_list(path: Path) -> tuple[str, list[tuple[int | None, int | None, bool, str]]]:
    """(time base, [(pts, dts, is_keyframe, sha1 of the bytes)]) of the first video stream."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [
            (p.pts, p.dts, bool(p.is_keyframe), hashlib.sha1(bytes(p)).hexdigest())
            for p in container.demux(stream)
            if p.size
        ]
        return str(stream.time_base), packets


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def compare_datasets(ours: str | Path, reference: str | Path) -> list[str]:
    ours, reference = Path(ours), Path(reference)
    mine, theirs = _files(ours), _files(reference)
    problems = [f"{ours / f}: missing (present in {reference})" for f in sorted(theirs - mine)]
    problems += [f"{ours / f}: extra (absent from {reference})" for f in sorted(mine - theirs)]
    for rel in sorted(mine & theirs):
        a, b = ours / rel, reference / rel
        if rel.endswith(".parquet"):
            ta, tb = pq.read_table(a), pq.read_table(b)
            if [(f.name, f.type) for f in ta.schema] != [(f.name, f.type) for f in tb.schema]:
                problems.append(
                    f"{a}: schema {[(f.name, str(f.type)) for f in ta.schema]} != "
                    f"{[(f.name, str(f.type)) for f in tb.schema]}"
                )
            elif ta.num_rows != tb.num_rows:
                problems.append(f"{a}: {ta.num_rows} rows != {tb.num_rows}")
            else:
                for name in ta.column_names:
                    if not ta.column(name).equals(tb.column(name)):
                        problems.append(f"{a}: column {name!r} differs")
        elif rel.endswith(".mp4"):
            if packet_list(a) != packet_list(b):
                problems.append(f"{a}: packets (pts, dts, flags, bytes) differ from {b}")
        elif rel.endswith(".json"):
            if json.loads(a.read_text()) != json.loads(b.read_text()):
                problems.append(f"{a}: parsed JSON differs from {b}")
        elif a.read_bytes() != b.read_bytes():
            problems.append(f"{a}: bytes differ from {b}")
    return problems
