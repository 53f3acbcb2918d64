"""`robostream convert REPO_ID` against the loopback Hub emulator (tests/remote/hub_server.py): the v2.1 revision
is downloaded, converted, and pushed to the branch in one commit with the v3.0 tag created last; `--no-push`
mutates nothing and runs offline. huggingface_hub runs unmodified in the subprocess, on its LFS upload path
(HF_HUB_DISABLE_XET=1: the emulator speaks LFS, not Xet)."""

from __future__ import annotations

import json
from pathlib import Path

from robostream.convert.compare import compare_datasets
from tests.helpers import DATA_MB, VIDEO_MB, run_cli
from tests.remote.hub_server import HubServer

REPO = "local/ds21"


def hub_env(server: HubServer, home: Path, **extra: str) -> dict[str, str]:
    return {
        "HF_ENDPOINT": server.endpoint,
        "HF_HOME": str(home),
        "HF_LEROBOT_HOME": str(home / "lerobot"),
        "HF_TOKEN": "hf_fake_local_token",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "0",
        **extra,
    }


def sizes_args() -> list[str]:
    return ["--data-file-size-in-mb", str(DATA_MB), "--video-file-size-in-mb", str(VIDEO_MB), "--workers", "2"]


def test_convert_repo_id_downloads_converts_and_pushes_one_commit_then_the_tag(
    v21_root: Path, reference: Path, tmp_path: Path
):
    with HubServer({REPO: v21_root}, tags=("v2.1",)) as server:
        repo = server.repos[REPO]
        before = repo.sha
        result = run_cli("convert", REPO, *sizes_args(), env=hub_env(server, tmp_path / "home"))
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        local = tmp_path / "home/lerobot" / REPO
        assert summary["output"] == str(local) and compare_datasets(local, reference) == []
        assert len(summary["hub"]["commits"]) == 1 and len(repo.commits) == 2  # one commit on top of v2.1
        head = repo.branches["main"]
        assert head != before and repo.tags["v3.0"] == head and repo.tags["v2.1"] == before
        pushed = repo.commits[head]
        assert sorted(pushed.files) == sorted(
            p.relative_to(reference).as_posix() for p in reference.rglob("*") if p.is_file()
        )
        assert all(pushed.data(name) == (local / name).read_bytes() for name in pushed.files)
        assert sorted(repo.commits[before].files) == sorted(
            p.relative_to(v21_root).as_posix() for p in v21_root.rglob("*") if p.is_file()
        )

        # pushing again (e.g. after a crash between commit and tag) moves the tag to the new head
        again = run_cli("convert", REPO, *sizes_args(), env=hub_env(server, tmp_path / "home"))
        assert again.returncode == 0, again.stderr[-3000:]
        assert "pushing only" in again.stdout and repo.tags["v3.0"] == repo.branches["main"]


def test_no_push_mutates_nothing_and_a_local_root_runs_offline(v21_root: Path, reference: Path, tmp_path: Path):
    with HubServer({REPO: v21_root}, tags=("v2.1",)) as server:
        repo = server.repos[REPO]
        result = run_cli("convert", REPO, "--no-push", *sizes_args(), env=hub_env(server, tmp_path / "home"))
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(repo.commits) == 1 and set(repo.tags) == {"v2.1"}
        assert not [r for r in server.log() if r[0] in ("POST", "PUT", "DELETE")]
    local = tmp_path / "home/lerobot" / REPO
    assert compare_datasets(local, reference) == []
    # with the data already local and the server gone: fully offline
    offline = run_cli(
        "convert",
        str(local) + "_old",
        "--out",
        str(tmp_path / "again"),
        "--no-push",
        *sizes_args(),
        env={"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert offline.returncode == 0, offline.stderr[-3000:]
    assert compare_datasets(tmp_path / "again", reference) == []


def test_a_missing_v21_revision_is_a_clear_error(v21_root: Path, tmp_path: Path):
    with HubServer({REPO: v21_root}) as server:  # no v2.1 tag
        result = run_cli("convert", REPO, *sizes_args(), env=hub_env(server, tmp_path / "home"))
    assert result.returncode == 2
    assert "no revision 'v2.1' on the Hub" in result.stderr


def test_push_in_chunks_retries_a_moved_branch_and_tags_the_last_commit(
    v21_root: Path, reference: Path, tmp_path: Path, monkeypatch
):
    """push_v30 in this process: several commits (max_operations), the first made against a stale head (the
    branch moved after it was read: the server answers 412 and the commit is redone on the new head)."""
    from huggingface_hub import HfApi, constants

    from robostream.convert import hub

    with HubServer({REPO: v21_root}, tags=("v2.1",)) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True, raising=False)
        monkeypatch.setenv("HF_TOKEN", "hf_fake_local_token")
        repo = server.repos[REPO]
        stale = [repo.sha]
        real_repo_info = HfApi.repo_info

        def repo_info_once_stale(self, *args, **kwargs):
            info = real_repo_info(self, *args, **kwargs)
            if stale:  # someone pushed right after we read the head
                repo.branches["main"] = "f" * 40
                repo.commits["f" * 40] = repo.commits[stale.pop()]
            return info

        monkeypatch.setattr(HfApi, "repo_info", repo_info_once_stale)
        summary = hub.push_v30(reference, REPO, max_operations=10)
    assert len(summary["commits"]) >= 3 and summary["commits"][-1] == repo.branches["main"]
    assert repo.tags["v3.0"] == repo.branches["main"]
    assert any(r[1].endswith("/commit/main") and r[2] == 412 for r in server.log())  # the refused stale commit
    pushed = repo.commits[repo.branches["main"]]
    assert sorted(pushed.files) == sorted(
        p.relative_to(reference).as_posix() for p in reference.rglob("*") if p.is_file()
    )


def test_repo_id_pushes_a_local_folders_conversion(v21_root: Path, reference: Path, tmp_path: Path):
    with HubServer({REPO: v21_root}, tags=("v2.1",)) as server:
        result = run_cli(
            "convert",
            str(v21_root),
            "--out",
            str(tmp_path / "out"),
            "--repo-id",
            REPO,
            *sizes_args(),
            env=hub_env(server, tmp_path / "home"),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        repo = server.repos[REPO]
        pushed = repo.commits[repo.tags["v3.0"]]
        assert all(pushed.data(name) == (tmp_path / "out" / name).read_bytes() for name in pushed.files)
    assert compare_datasets(tmp_path / "out", reference) == []
    assert not (tmp_path / "home/lerobot").exists()  # nothing downloaded
