"""Progress of a conversion read from the work dir's done markers: a live bar (files, MB/s, ETA) on a terminal,
a line per 10% otherwise (CI logs)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from robostream.convert.manifest import WorkDir
from robostream.convert.plan import FileTask


class Progress:
    def __init__(self, work: WorkDir, tasks: list[FileTask], *, command: str, log: Callable[[str], None]) -> None:
        self.work, self.tasks, self.command, self.log = work, tasks, command, log
        self.pending = {t.task_id for t in tasks if not work.is_done(t.task_id)}
        self.written = 0
        self.started = time.monotonic()
        self.total = len(tasks)
        self._reported_tenth = -1
        self._bar = None
        if sys.stderr.isatty() and self.pending:
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn(command),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} files"),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                transient=True,
            )
            self._bar_task = self._bar.add_task(
                command, total=self.total, completed=self.total - len(self.pending), rate=""
            )
            self._bar.start()

    def tick(self) -> None:
        finished = {t for t in self.pending if self.work.is_done(t)}
        if not finished:
            return
        self.written += sum(self.work.done_size(t) or 0 for t in finished)
        self.pending -= finished
        done = self.total - len(self.pending)
        rate = self.written / max(time.monotonic() - self.started, 1e-9) / 1024**2
        if self._bar is not None:
            self._bar.update(self._bar_task, completed=done, rate=f"{rate:.1f} MB/s")
        elif done * 10 // self.total > self._reported_tenth:
            self._reported_tenth = done * 10 // self.total
            self.log(f"{self.command}: {done}/{self.total} files, {self.written / 1024**2:.1f} MB at {rate:.1f} MB/s")

    def close(self) -> None:
        self.tick()
        if self._bar is not None:
            self._bar.stop()
