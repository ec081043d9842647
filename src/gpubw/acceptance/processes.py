"""Other programs on the run's GPUs: waiting until they are gone before a testcase
(``--wait-idle``), and a background sampler that notices one that comes and goes while a
testcase measures (the checks at a testcase's start and end alone would miss it).

Both ask the backend (``gpu_processes()``: NVML's compute processes by PCI bus id; the
simulated model's ``other_processes``) and leave out the run's own processes. Waiting is on
the backend's clock and pause (``clock()``, ``pause()``): a simulated run waits in modelled
time, so its tests never depend on the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

#: seconds between two looks while waiting for idle GPUs, and between two samples
POLL_S = 0.5
#: at most this many distinct (GPU, processes, testcase) sightings are kept by the sampler
MAX_SIGHTINGS = 1000

Processes = Mapping[str, Sequence[int]]


def others_on(
    procs: Processes | None, devices: Sequence[Mapping[str, Any]], own: frozenset[int]
) -> dict[int, tuple[int, ...]]:
    """ordinal -> the other programs' pids on it (GPUs without any left out)."""
    out = {}
    for d in devices:
        pids = tuple(p for p in (procs or {}).get(d["pci_bus_id"], ()) if p not in own)
        if pids:
            out[int(d["ordinal"])] = pids
    return out


@attrs.frozen
class Waited:
    """What a wait for idle GPUs came to: the seconds waited and, when the bound was reached
    first, the processes still there (ordinal -> pids)."""

    seconds: float
    busy: dict[int, tuple[int, ...]] = attrs.field(factory=dict)


def wait_idle(
    backend: Any,
    devices: Sequence[Mapping[str, Any]],
    own: frozenset[int],
    bound_s: float,
    poll_s: float = POLL_S,
) -> Waited:
    """Wait until no other program computes on ``devices``, at most ``bound_s`` seconds (on
    the backend's clock); a backend that cannot say (None) is taken as idle."""
    began = backend.clock()
    while True:
        busy = others_on(backend.gpu_processes(), devices, own)
        waited = backend.clock() - began
        if not busy:
            return Waited(waited)
        if waited >= bound_s:
            return Waited(waited, busy)
        backend.pause(min(poll_s, bound_s - waited))


class ProcessSampler:
    """Samples the other programs on the GPUs every ``every_s`` seconds on a thread of its
    own while the run goes (:meth:`start` / :meth:`stop`; a daemon thread, bounded by
    :data:`MAX_SIGHTINGS`), noting each (GPU, pids) with the testcase it was seen during
    (:meth:`during`). :meth:`sample` is one look, also for tests."""

    def __init__(
        self,
        query: Callable[[], Processes | None],
        devices: Sequence[Mapping[str, Any]],
        own: frozenset[int],
        every_s: float = POLL_S,
    ) -> None:
        self.query = query
        self.devices = list(devices)
        self.own = own
        self.every_s = every_s
        #: the testcase now running ("" between testcases: nothing is noted then)
        self.moment = ""
        #: (ordinal, pids) -> the moments it was seen, in order
        self.seen: dict[tuple[int, tuple[int, ...]], list[str]] = {}
        self._count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def during(self, moment: str) -> None:
        with self._lock:
            self.moment = moment

    def sample(self) -> None:
        """One look at the GPUs; never raises."""
        with self._lock:
            moment = self.moment
        if not moment:
            return
        try:
            procs = self.query()
        except Exception:  # a fact is not worth a failed run
            return
        with self._lock:
            for ordinal, pids in others_on(procs, self.devices, self.own).items():
                moments = self.seen.setdefault((ordinal, pids), [])
                if moment not in moments and self._count < MAX_SIGHTINGS:
                    moments.append(moment)
                    self._count += 1

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpubw-processes", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def stop(self) -> None:
        """Stop sampling (waits for the thread, bounded); safe to call twice."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=max(5.0, 2 * self.every_s))
