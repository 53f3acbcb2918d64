"""Shared by the scripts that run in the lerobot interpreter (lerobot_*.py; a script's folder is on its sys.path):
offline mode and a private HF cache, set before lerobot or huggingface_hub is imported."""

import os
import tempfile


def setup_offline_env(hf_home):
    hf_home = hf_home or os.environ.get("HF_HOME") or tempfile.mkdtemp(prefix="lerobot_hf_home_")
    os.makedirs(hf_home, exist_ok=True)
    os.environ["HF_HOME"] = hf_home
    os.environ["HF_LEROBOT_HOME"] = os.path.join(hf_home, "lerobot")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(hf_home, "datasets")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return hf_home
