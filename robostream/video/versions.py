"""Which torch release a torchcodec release is built for, so a mismatched pair fails with one clear message.

torchcodec ships a C++ extension compiled against one torch release; with another torch it fails to load with an
undefined-symbol error deep in its loader. torchcodec's compatibility table (its README): 0.1 -> torch 2.5, 0.2 ->
2.6, 0.3-0.5 -> 2.7, 0.6-0.7 -> 2.8, 0.8-0.9 -> 2.9, and from 0.10 on 0.N -> 2.N (0.11 -> 2.11 is lerobot 0.6.1's
pair, 0.13 -> 2.13 ours).
"""

from __future__ import annotations

import re

_TABLE = {1: 5, 2: 6, 3: 7, 4: 7, 5: 7, 6: 8, 7: 8, 8: 9, 9: 9}  # torchcodec 0.N -> torch 2.M


def _minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def torch_for_torchcodec(torchcodec_version: str) -> str | None:
    """The torch release ("2.M") torchcodec `torchcodec_version` is built for; None when unknown (0.0.x, 1.x)."""
    parsed = _minor(torchcodec_version)
    if parsed is None or parsed[0] != 0 or parsed[1] < 1:
        return None
    minor = _TABLE.get(parsed[1], parsed[1] if parsed[1] >= 10 else None)
    return None if minor is None else f"2.{minor}"


def mismatch(torch_version: str, torchcodec_version: str) -> str | None:
    """A message when the pair does not go together (None when it does, or when the table does not know)."""
    wanted = torch_for_torchcodec(torchcodec_version)
    have = _minor(torch_version)
    if wanted is None or have is None or f"{have[0]}.{have[1]}" == wanted:
        return None
    have_minor = f"{have[0]}.{have[1]}"
    pair = (
        f"torchcodec 0.{have[1]}"
        if have[0] == 2 and have[1] >= 10
        else "the torchcodec release its compatibility table names"
    )
    return (
        f"torch {torch_version} with torchcodec {torchcodec_version}: torchcodec {torchcodec_version} is built "
        f"for torch {wanted}. Install a matching pair, e.g. torch {wanted}.* with torchcodec "
        f"{torchcodec_version.split('+')[0]}, or keep torch {have_minor} and install {pair} "
        "(https://github.com/pytorch/torchcodec#installing-torchcodec); or pass video_backend='pyav'"
    )
