"""lerobot's training command with robostream's datasets and loaders underneath (`python -m robostream.lerobot.train`).

Needs lerobot 0.6 (and its `accelerate`): it is imported here, never by the rest of robostream.
"""
