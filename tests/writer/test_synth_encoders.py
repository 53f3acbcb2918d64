"""synth's encoder processes: started by the forkserver method (never forked from a process with threads), each
camera of each episode bounded in time, a stuck encoder an error naming the episode and camera, not a hang."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from robostream.synth import encode_bound_s

STUCK_BOUND_S = 4


def test_a_stuck_encoder_fails_naming_the_episode_and_camera(tmp_path: Path):
    """Every encoder process is stopped (SIGSTOP: alive, never progressing, as the futex-waiting SVT-AV1 worker
    was); generate() must fail within its bound, name what it was waiting for, kill the workers and leave no
    dataset behind."""
    root = tmp_path / "ds"
    script = textwrap.dedent(
        f"""
        from robostream.synth import SynthConfig, generate
        if __name__ == "__main__":
            config = SynthConfig(episodes=6, episode_length=150, height=128, width=128, cameras=2)
            generate({str(root)!r}, config, jobs=2, encode_timeout_s={STUCK_BOUND_S})
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    parent = psutil.Process(child.pid)
    stopped: set[int] = set()
    deadline = time.monotonic() + 60
    # The encoders are the forkserver's children (the server is the only child of ours that has children).
    while len(stopped) < 2 and child.poll() is None and time.monotonic() < deadline:
        for server in parent.children():
            for worker in server.children():
                if worker.pid not in stopped:
                    worker.suspend()
                    stopped.add(worker.pid)
        time.sleep(0.02)
    if len(stopped) < 2:  # say which: the child's end and its error, or what its process tree held at the deadline
        ended = child.poll()
        tree = [] if ended is not None else [(p.pid, p.name(), p.status()) for p in parent.children(recursive=True)]
        stderr = child.communicate(timeout=30)[1] if ended is not None else ""
        raise AssertionError(
            f"{len(stopped)} encoder processes seen in 60 s; generate() exit code {ended}, process tree {tree}, "
            f"stderr: {stderr[-2000:]}"
        )
    started = time.monotonic()
    _, stderr = child.communicate(timeout=120)
    assert child.returncode != 0
    assert time.monotonic() - started < STUCK_BOUND_S + 60
    assert "EncodeError: synth: episode " in stderr, stderr[-2000:]
    assert f"camera observation.images.cam0: not encoded after {STUCK_BOUND_S} s (a stuck encoder)" in stderr or (
        f"camera observation.images.cam1: not encoded after {STUCK_BOUND_S} s (a stuck encoder)" in stderr
    ), stderr[-2000:]
    # the error says where each worker was (here: stopped, so no Python stacks, and the kernel's stop)
    assert all(f"worker {pid}: threads in the kernel: " in stderr for pid in stopped), stderr[-2000:]
    assert "do_signal_stop" in stderr, stderr[-2000:]
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in stopped)
    assert not (root / "meta" / "info.json").exists()  # the writer discarded its staging


def test_an_unguarded_script_is_told_to_guard_its_call(tmp_path: Path):
    """The forkserver imports the main module; a script calling generate() at its top level gets the idiom to
    use, not a bare BrokenProcessPool."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from robostream.synth import SynthConfig, generate\n"
        f"generate({str(tmp_path / 'ds')!r}, SynthConfig(episodes=1, episode_length=4, height=64, width=64, "
        "cameras=1), jobs=1)\n"
    )
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run.returncode != 0
    assert "put the call under `if __name__ == '__main__':`" in run.stderr, run.stderr[-2000:]


def test_the_default_bound_grows_with_the_video():
    assert encode_bound_s(200, 256, 256) < encode_bound_s(2000, 256, 256) < encode_bound_s(2000, 640, 480)
