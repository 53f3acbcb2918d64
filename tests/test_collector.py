"""collector_paused: off for the block, restored by the last of overlapping blocks, a process's own off kept off."""

from __future__ import annotations

import gc
import threading

from robostream.collector import collector_paused


def test_paused_for_the_block_and_restored():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block is still in progress
    assert gc.isenabled()


def test_overlapping_blocks_of_threads_restore_once_the_last_ends():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with collector_paused():
        second_in.set()
        first_out.wait(10)
        assert not gc.isenabled()  # the first block ended, this one has not
    thread.join(10)
    assert gc.isenabled()


def test_a_process_that_turned_it_off_keeps_it_off():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_child_forked_during_a_pause_gets_its_collector_back():
    """The thread whose block was in progress is not in a forked child: the child's collector is on again, and a
    block the child itself begins and ends leaves it on."""
    import os

    with collector_paused():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's cleanup
            with collector_paused():
                paused_in_child = not gc.isenabled()
            os.write(write, f"{int(gc.isenabled())}{int(paused_in_child)}".encode())
            os._exit(0)
        os.close(write)
        answer = os.read(read, 2).decode()
        os.waitpid(pid, 0)
        assert not gc.isenabled()  # the parent's block is still in progress
    assert gc.isenabled()
    assert answer == "11"  # on in the child at once, off within its own block, on after it
