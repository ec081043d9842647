"""A run over the ranks of a world (``mpirun -np N gpubw ...``): what each rank runs, how
the ranks agree, and what rank 0 reports.

The runner stays rank-blind; it calls the few hooks of :class:`Ranks` (a no-op for a world of
one rank, so a single-process run is exactly what it always was):

* **multinode testcases** (#44-#56) run on every rank, each rank driving its own device
  (:attr:`gpubw.memory.system.System.rank_device`); after each one the ranks agree on its status
  (:meth:`gpubw.world.World.agree`): an error on any rank makes it Error on every rank, with
  that rank's message, and the run goes on;
* **single-node testcases** run on each host's first rank only (all the host's GPUs, hosts in
  parallel), while the host's other ranks wait; each host's result is gathered to rank 0
  (bounded by what the leader may legitimately take), which reports its own host's as
  nvbandwidth does and every other host's in :attr:`gpubw.model.results.Report.hosts`;
* a **broken world** (a rank lost or hung: a collective timed out) stops the run after the
  current testcase (:attr:`Ranks.stopped`); rank 0 still writes its report;
* the run's **exit code** is rank 0's, broadcast to every rank (:func:`finish`), which then
  closes the world (collectively; an MPI world that cannot finish cleanly is aborted).

Nothing here prints; only rank 0's caller writes output.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from gpubw.memory.system import System
from gpubw.model.errors import GpubwError
from gpubw.model.results import Status, TestcaseResult
from gpubw.runner.registry import Entry, Selected
from gpubw.world import World, WorldError, device_assignment

#: a runner step: (item, system, size, signals) -> result
Step = Callable[[Selected, System, "int | None", Any], TestcaseResult]


def is_multinode(item: Selected) -> bool:
    """Whether ``item`` is a testcase that runs across the ranks (every rank takes part)."""
    from gpubw.testcases.multinode_shapes import MultinodeTestcase

    cls = getattr(item, "cls", None)
    return isinstance(item, Entry) and isinstance(cls, type) and issubclass(cls, MultinodeTestcase)


def leader_bound(system: System) -> float:
    """How long a host's other ranks wait for its first rank's single-node testcase: every
    cell of an N x N testcase, every sample at its gate and sync bounds, plus the world's
    own bound (the leader's syncs are bounded, so a hung leader still surfaces)."""
    o = system.options
    n = max(system.device_count, 1)
    return n * n * o.samples * (o.gate_timeout_s + o.sync_timeout_s) + system.world.timeout_s


class Ranks:
    """The per-run state of a multi-rank run (see the module docstring). Construct it once
    the System is open on every rank: it exchanges each rank's host and device."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.world: World = system.world
        #: True once the world broke: the runner runs nothing further
        self.stopped = False
        #: rank 0: other hosts' single-node results, by host index
        self._hosts: dict[int, list[TestcaseResult]] = {}
        self._processes: list[dict[str, Any]] = []
        #: rank 0: run warnings of every host (more ranks than GPUs), once per host
        self.warnings: list[str] = []
        if self.active:
            device = system.rank_device
            info = system.devices[device] if system.devices else None
            mine = {
                "rank": self.world.rank,
                "host": self.world.host_name,
                "device": device,
                "name": getattr(info, "name", "unknown"),
                "pci": getattr(info, "pci_short", "") if info is not None else "",
                "nvlink_domain": _domain(system, device, info is not None),
                "selected": system.selected(device),
            }
            warning = device_assignment(self.world, system.device_count).warning
            gathered = self.world.allgather((mine, warning))
            self._processes = [p for p, _ in gathered]
            self.warnings = [w for _, w in gathered if w]
        #: the NVLink domains of the measured ranks (counted once, when first reported)
        self._domain_count: int | None = None

    @property
    def active(self) -> bool:
        """Whether there is more than one rank (else every hook is a no-op)."""
        return self.world.size > 1

    # -- the runner's step ------------------------------------------------------------------
    def step(
        self, step: Step, item: Selected, system: System, size: int | None, signals: Any
    ) -> TestcaseResult:
        """Run one runner step as this rank must (see the module docstring)."""
        if not self.active:
            return step(item, system, size, signals)
        if is_multinode(item):
            return self._multinode(step(item, system, size, signals))
        return self._single_node(step, item, system, size, signals)

    def _multinode(self, result: TestcaseResult) -> TestcaseResult:
        """Agree on a multinode testcase's status across the ranks."""
        error = result.message if result.status is Status.ERROR else None
        if result.status is Status.INTERRUPTED:
            error = result.message
        broke_already = self.world.broken is not None
        try:
            agreement = self.world.agree(error)
        except WorldError as exc:
            self.stopped = True
            if result.status is Status.INTERRUPTED:
                return result
            if error and broke_already:
                # the agreement was refused because the world broke inside the testcase,
                # which its own error already says: the refusal would only repeat it
                return result
            message = f"{result.message}; {exc}" if error else str(exc)
            return _evolve(result, Status.ERROR, message)
        if self.world.broken is not None:
            self.stopped = True
        if agreement.ok or result.status is Status.INTERRUPTED:
            return result
        messages = {m for _, m in agreement.failures}
        if len(agreement.failures) == self.world.size and len(messages) == 1:
            # every rank raised the same error at one agreement point: it names the rank
            return _evolve(result, Status.ERROR, messages.pop())
        return _evolve(result, Status.ERROR, agreement.describe())

    def _single_node(
        self, step: Step, item: Selected, system: System, size: int | None, signals: Any
    ) -> TestcaseResult:
        world = self.world
        leader = world.local_rank == 0
        if leader:
            result = step(item, system, size, signals)
        else:
            first = world.host_leaders()[world.host_index]
            key = getattr(item, "key", getattr(item, "token", "?"))
            result = TestcaseResult(
                key=key,
                status=Status.WAIVED,
                message=f"single-node testcase: run by this host's first rank (rank {first})",
                index=getattr(item, "index", None),
                size=size,
            )
        try:
            gathered = world.gather(
                (world.host_index, result) if leader else None,
                root=0,
                timeout_s=leader_bound(system),
            )
        except WorldError as exc:
            self.stopped = True
            if result.status in (Status.ERROR, Status.INTERRUPTED):
                return result
            return _evolve(result, Status.ERROR, f"{exc}")
        if gathered is not None:  # rank 0
            for entry in gathered:
                if entry is not None and entry[0] != world.host_index:
                    self._hosts.setdefault(entry[0], []).append(entry[1])
        return result

    # -- the report ---------------------------------------------------------------------------
    def _domains(self) -> int:
        """How many NVLink domains the measured ranks span (:func:`domain_count`), counted
        once: O(N) a rank, asked by every report header and report."""
        if self._domain_count is None:
            self._domain_count = domain_count(self._processes)
        return self._domain_count

    def report_fields(self) -> dict[str, Any]:
        """The Report's ``world``, ``hosts`` and ``host`` (rank 0's host; empty for one
        rank)."""
        if not self.active:
            return {}
        world = self.world
        fields: dict[str, Any] = {
            "host": world.host_name,
            "world": {
                "size": world.size,
                "hosts": list(world.host_names),
                "rank_hosts": list(world.rank_hosts),
                "processes": self._processes,
                "nvlink_domains": self._domains(),
                "mpi_library": getattr(world, "library", None),
                "handle_type": self.system.handle_kind,
                "launcher": getattr(world, "launcher", None),
            },
        }
        fields["hosts"] = [
            (world.host_names[h], tuple(results)) for h, results in sorted(self._hosts.items())
        ]
        return fields


def _domain(system: System, device: int, present: bool) -> str:
    """This rank's NVLink domain (its host's name where it has no GPU)."""
    return system.backend.nvlink_domain(device) if present else system.world.host_name


def domain_count(processes: list[dict[str, Any]]) -> int:
    """How many NVLink domains the measured ranks' GPUs span (the ranks whose GPU
    ``--devices`` selects; every rank without it)."""
    return len({p.get("nvlink_domain") for p in processes if p.get("selected", True)})


def _evolve(result: TestcaseResult, status: Status, message: str) -> TestcaseResult:
    import attrs

    return attrs.evolve(result, status=status, message=message, matrices=())


def finish(world: World, code: int) -> int:
    """The run's last step on every rank: rank 0's exit code, broadcast (bounded; a rank
    whose world broke, by a signal mid-step say, makes every rank's broken:
    :meth:`gpubw.world.World.final_word`), then the world closed with it (collective; a
    broken MPI world is aborted with the code, by rank 0 first: another rank of a broken
    world waits up to the world's bound for rank 0 to write its report and end the job).
    Returns the code this process exits with."""
    if world.size > 1:
        with contextlib.suppress(GpubwError):
            code = world.final_word(code)  # any rank broken: every rank's world is
        if world.rank != 0 and world.broken is not None:
            # closing a broken world aborts the whole job: leave that to rank 0, once it has
            # written its report (its abort ends this process); bounded all the same
            time.sleep(world.timeout_s)
    world.close(code)
    return code


def rank_prefix(world: World) -> str:
    """The prefix of a non-root rank's stderr lines: ``rank <r> (<host>): ``."""
    return f"rank {world.rank} ({world.host_name}): " if world.size > 1 else ""


__all__ = [
    "Ranks",
    "finish",
    "is_multinode",
    "leader_bound",
    "rank_prefix",
]
