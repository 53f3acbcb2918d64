"""The package as users get it: a wheel and an sdist built from the tracked files, installed into a fresh venv.

The fresh venv takes its dependencies from this environment (a .pth line; no index, no network) and robostream
itself only from the wheel, so an import that works here but not from the wheel (a module left out, a missing
entry point) fails here.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import robostream

REPO = Path(__file__).parents[1]
pytestmark = pytest.mark.timeout(600)


def _run(*cmd: str | Path, cwd: Path) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wheel + sdist of the files git tracks (a copy of them, so the checkout gets no build/ or egg-info)."""
    source = tmp_path_factory.mktemp("src") / "robostream"
    tracked = _run("git", "ls-files", "-co", "--exclude-standard", cwd=REPO).splitlines()
    for name in tracked:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", out, ".", cwd=source)
    return out


def test_wheel_holds_every_module_ranges_and_the_command(dist):
    (wheel,) = dist.glob("robostream-*.whl")
    assert wheel.name.startswith(f"robostream-{robostream.__version__}-py3")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "robostream").rglob("*.py")}
    assert modules <= names, f"left out of the wheel: {sorted(modules - names)[:10]}"
    info = f"robostream-{robostream.__version__}.dist-info"
    metadata = email.message_from_string(zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode())
    requires = metadata.get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    assert not [r for r in core if "==" in r], "exact pins belong in scripts/constraints.txt, not the package"
    assert any(r.startswith("torch>=") for r in core) and any(r.startswith("torchcodec>=") for r in core)
    assert not any(r.startswith("s3fs") for r in core) and "s3" in metadata.get_all("Provides-Extra")
    assert "robostream = robostream.cli:main" in zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()


def test_sdist_rebuilds_the_same_wheel_contents(dist, tmp_path):
    (sdist,) = dist.glob("robostream-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()
    _run(sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", tmp_path / "out", ".", cwd=unpacked)
    (again,) = (tmp_path / "out").glob("*.whl")
    (wheel,) = dist.glob("robostream-*.whl")
    assert set(zipfile.ZipFile(again).namelist()) == set(zipfile.ZipFile(wheel).namelist())


def test_the_wheel_installs_into_a_fresh_venv_and_runs(dist, tmp_path):
    (wheel,) = dist.glob("robostream-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip())
    # Dependencies from this environment (a plain path: its .pth files, e.g. the editable robostream, stay off).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp_path)
    assert (
        _run(venv / "bin" / "robostream", "--version", cwd=tmp_path).strip() == f"robostream {robostream.__version__}"
    )
    where = _run(
        python,
        "-c",
        "import robostream.datasets.streaming as m, robostream; "
        "print(m.__file__); print(robostream.StreamingLeRobotDataset.__name__)",
        cwd=tmp_path,
    ).split()
    assert where[0].startswith(str(site)) and where[1] == "StreamingLeRobotDataset"
