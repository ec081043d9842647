"""The fleet with its history (``gpubw fleet [PATH...] --db FILE [--since SPAN]``): the
reports the paths name are added to the history file as they are read (one transaction),
the fleet is judged from them, or, without paths, from the newest report of each node the
history holds in the window; with a window (``--since``) each GPU's trend against its own
past is part of the result (:class:`~gpubw.fleet.analysis.FleetReport`'s ``history``).
"""

from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import attrs

from gpubw.fleet.analysis import FleetReport, judge
from gpubw.fleet.gather import collect, read_all, report_files
from gpubw.fleet.history import HistoryError, open_history
from gpubw.fleet.stats import Settings
from gpubw.fleet.trends import trends
from gpubw.model.errors import UsageError


@attrs.frozen
class Window:
    """The history to read: the file, and how far back (``since_s`` seconds before
    ``now``; None: all of it, and no trends)."""

    db: str
    since_s: float | None = None
    now: datetime.datetime | None = None

    @property
    def start(self) -> float | None:
        """The window's start in seconds since the epoch (None: no start)."""
        if self.since_s is None:
            return None
        now = self.now or datetime.datetime.now(datetime.timezone.utc)
        return now.timestamp() - self.since_s


def analyse_kept(
    paths: Sequence[str | Path],
    settings: Settings,
    window: Window,
    workers: int | None = None,
) -> FleetReport:
    """The fleet of ``paths`` (each report added to the history on the way), or of the
    history alone when ``paths`` is empty; with the GPUs' trends when the window has a
    start. UsageError for a history file gpubw may not use, or one that holds no report
    of the window when it is all there is to judge."""
    try:
        return _analyse(paths, settings, window, workers)
    except (sqlite3.Error, HistoryError) as exc:  # locked past the wait, the disk full,
        # a damaged or tampered file: its values are checked as they are read
        raise HistoryError(f"history database {window.db}: {exc}") from None


def _analyse(
    paths: Sequence[str | Path], settings: Settings, window: Window, workers: int | None
) -> FleetReport:
    start = window.start
    files = report_files(paths) if paths else []  # a path that is none: no file made
    with open_history(window.db, create=bool(paths)) as history:
        if paths:
            gathered = collect(history.keep(read_all(files, workers)), len(files))
        else:
            latest = list(history.latest(start))
            if not latest:
                since = "" if start is None else " started in the window (--since)"
                raise UsageError(
                    f"history database {window.db} holds no report{since}: give report "
                    "files or folders to add",
                    param="db",
                )
            gathered = collect(latest, len(latest))
        report = judge(gathered, settings)
        if start is None:
            return report
        return attrs.evolve(
            report, history=tuple(trends(history.series(start), settings.threshold))
        )
