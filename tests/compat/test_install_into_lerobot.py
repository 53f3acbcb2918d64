"""Installing robostream into an environment that already has lerobot changes none of lerobot's pins.

pip resolves `pip install <this checkout>` against the lerobot interpreter's installed packages (a dry run with a
JSON report: nothing is installed). Opt-in, like every test that needs lerobot's environment.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]
# What lerobot 0.6.1 pins or bounds and robostream also needs: none may move.
KEPT = (
    "torch",
    "torchcodec",
    "fsspec",
    "numpy",
    "pyarrow",
    "av",
    "datasets",
    "huggingface-hub",
    "opencv-python-headless",
    "pillow",
    "pandas",
)


def test_pip_install_into_the_lerobot_environment_moves_none_of_its_pins(lerobot_python, tmp_path):
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [lerobot_python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    installs = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    moved = {name: version for name, version in installs.items() if name in KEPT}
    assert not moved, f"installing robostream would change lerobot's environment: {moved}"
    assert "robostream" in installs
