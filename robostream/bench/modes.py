"""Benchmark read patterns as `delta_timestamps`.

- single: the current frame of every camera (typical behaviour-cloning step).
- sarm: 8 frames per camera spaced 1 s apart, ending at the current frame (reward-model style windows that
  overlap heavily between consecutive samples), plus the state over the same steps.
"""

from __future__ import annotations

SARM_STEPS = 8
SARM_SPACING_S = 1.0


def mode_delta_timestamps(
    mode: str, camera_keys: list[str], state_key: str | None = "observation.state"
) -> dict[str, list[float]] | None:
    if mode == "single":
        return None
    if mode == "sarm":
        deltas = [-(SARM_STEPS - 1 - i) * SARM_SPACING_S for i in range(SARM_STEPS)]
        window = {key: deltas for key in camera_keys}
        if state_key:
            window[state_key] = deltas
        return window
    raise ValueError(f"benchmark mode {mode!r}: expected 'single' or 'sarm'")
