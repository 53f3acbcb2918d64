"""A dataset on the Hugging Face Hub: download its v2.1 revision, and push the converted v3.0 dataset.

The push replaces the v2.1 files of a branch by the v3.0 files in as few commits as possible: LFS files are
uploaded first (preupload: nothing is visible yet), then one commit with every addition and deletion, made against
the branch head read before (`parent_commit`: if someone pushed in between, the Hub refuses and the commit is
retried on the new head). Past `max_operations` per commit the operations go in several commits, each retried
the same way. The `v3.0` tag is created last, on the final commit, so a reader that follows the tag never sees a
half-pushed dataset (lerobot's converter tags before uploading and pushes in several unordered commits).
"""

from __future__ import annotations

import re
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

from robostream.errors import RobostreamError

V30_TAG = "v3.0"
MAX_OPERATIONS = 20_000  # per commit; the Hub handles large commits, but not unbounded ones
COMMIT_ATTEMPTS = 3
# What a v2.1 layout has and a v3.0 one does not (lerobot's converter deletes the same patterns).
V21_ONLY = re.compile(r"^(data/chunk-\d+/episode_\d+\.parquet|videos/chunk-\d+/.+/episode_\d+\.mp4|meta/[^/]+\.jsonl)$")


def download_v21(repo_id: str, *, local_dir: Path, revision: str = "v2.1", token: str | None = None) -> Path:
    """The v2.1 revision (tag, branch or commit) of a Hub dataset, downloaded to `local_dir`."""
    try:
        snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=local_dir, token=token)
    except RevisionNotFoundError as exc:
        raise RobostreamError(
            f"{repo_id}: no revision {revision!r} on the Hub; pass the v2.1 branch, tag or commit with --revision"
        ) from exc
    return local_dir


def _commit_with_retry(api: HfApi, repo_id: str, branch: str, operations: list, message: str) -> str:
    """One commit against the branch head as read just before; redone on the new head when the branch moved in
    between (the Hub answers 412), up to COMMIT_ATTEMPTS times."""
    attempt = 1
    while True:
        head = api.repo_info(repo_id, repo_type="dataset", revision=branch).sha
        try:
            return api.create_commit(
                repo_id, operations, commit_message=message, repo_type="dataset", revision=branch, parent_commit=head
            ).oid
        except HfHubHTTPError as exc:
            moved = exc.response is not None and exc.response.status_code == 412
            if not moved or attempt == COMMIT_ATTEMPTS:
                raise
            attempt += 1


def push_v30(
    root: Path, repo_id: str, *, branch: str = "main", token: str | None = None, max_operations: int = MAX_OPERATIONS
) -> dict[str, object]:
    """Replace the v2.1 files of `branch` by the v3.0 dataset at `root`, then tag the result `v3.0`.

    Args:
        root: the converted (v3.0) dataset folder.
        repo_id: the Hub dataset to push to.
        branch: the branch whose files are replaced.
        token: Hub token (default: huggingface_hub's own lookup).
        max_operations: additions + deletions per commit.
    """
    try:
        return _push(root, repo_id, branch=branch, token=token, max_operations=max_operations)
    except HfHubHTTPError as exc:
        raise RobostreamError(
            f"pushing {root} to {repo_id}@{branch} failed: {exc}. The converted dataset stays at "
            f"{root}; run the same command again to push it"
        ) from exc


def _push(root: Path, repo_id: str, *, branch: str, token: str | None, max_operations: int) -> dict[str, object]:
    api = HfApi(token=token)
    existing = api.list_repo_files(repo_id, repo_type="dataset", revision=branch)
    local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    additions = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(root / rel)) for rel in local]
    deletions = [CommitOperationDelete(path_in_repo=rel) for rel in existing if V21_ONLY.match(rel)]
    operations = additions + deletions
    api.preupload_lfs_files(repo_id, additions, repo_type="dataset", revision=branch)
    commits = []
    parts = [operations[i : i + max_operations] for i in range(0, len(operations), max_operations)]
    for number, part in enumerate(parts, start=1):
        suffix = f" ({number}/{len(parts)})" if len(parts) > 1 else ""
        commits.append(_commit_with_retry(api, repo_id, branch, part, f"Convert to LeRobot v3.0{suffix}"))
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    if any(tag.name == V30_TAG for tag in refs.tags):
        api.delete_tag(repo_id, tag=V30_TAG, repo_type="dataset")
    api.create_tag(repo_id, tag=V30_TAG, revision=commits[-1], repo_type="dataset")
    return {
        "repo_id": repo_id,
        "branch": branch,
        "commits": commits,
        "tag": V30_TAG,
        "files_added": len(additions),
        "files_deleted": len(deletions),
    }
