"""What a benchmark run can be: robostream's loaders, the peers' factories, the modes and the slow store's APIs.

Apart from the runner so that building the command line (robostream/cli.py: every `robostream` command builds the
whole parser) imports neither torch nor the loaders.
"""

from __future__ import annotations

from typing import Literal, get_args

LOADERS = ("stream", "map")
MODES = ("single", "sarm")
# Peer loaders and their factories (files loaded by path under the peer's own interpreter, see probe.py).
PEER_FACTORIES = {
    "lerobot": "lerobot_peer.py:build",  # lerobot's LeRobotDataset, as lerobot-train builds it
    "lerobot-stream": "lerobot_peer.py:build_streaming",  # lerobot's StreamingLeRobotDataset (Hub streaming)
    "lancedb": "lancedb_peer.py:build",  # lerobot-lancedb's LanceDBDataset over its own conversion
}
PEERS = tuple(PEER_FACTORIES)
StoreApi = Literal["http", "hub", "s3"]
STORE_APIS = get_args(StoreApi)
StoreCores = Literal["auto", "own", "shared"]  # whether the slow store gets a core of its own (bench/cores.py)
STORE_CORES = get_args(StoreCores)
MapSampler = Literal["look_ahead", "plain"]
