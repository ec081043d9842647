"""Node acceptance, wired together: NVML facts around a run, verdicts on its cells, and the
``gpubw check``, ``gpubw expect-from`` and ``gpubw info`` commands' work.

* :class:`RunWatch` is a run's listener (:mod:`gpubw.model.events`): it reads the node's
  NVML facts when the System opens and as it closes (clocks and throttle reasons at both),
  and the compute processes on the GPUs at the start and the end of every testcase;
  :meth:`RunWatch.finish` puts the facts into the Report's device records (``nvml``,
  ``nvml_end``) and a warning naming the GPU and the process ids wherever another program
  computed on a GPU. Given a :class:`Judging`, it also judges each testcase as it finishes
  (the verdicts a streaming writer prints after its matrices) and the whole run at its end.
* :func:`judge` evaluates a Report (:func:`gpubw.acceptance.expect.evaluate`: floors/ceilings
  from an
  expectations file or the built-in one, the peer-outlier rule, the noise rule), adds to
  every failed verdict the NVML facts that can explain it ("GPU 3: PCIe Gen4 x8, max Gen5
  x16"), and returns the Report with ``verdicts`` and ``expectations`` set (a failed verdict
  makes its exit code 3).
* :func:`info` describes the node: devices, NVML facts, and the peer-access / link matrix.

Nothing here prints; the CLI does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpubw.acceptance.processes import POLL_S, ProcessSampler, wait_idle
from gpubw.hw.nvml import NodeFacts, counter_suspects, device_facts, match_devices, suspects
from gpubw.model import schemas
from gpubw.model.errors import UsageError
from gpubw.model.events import Finished, RunListener, Step
from gpubw.model.options import DEFAULT_CV_THRESHOLD, DEFAULT_OUTLIER_PCT
from gpubw.model.results import Report
from gpubw.model.sizes import format_size
from gpubw.model.trace import NO_TRACE, Tracer
from gpubw.world import process_ids

# the expectations and the soak rule are imported where a judged run or a soak uses them: a
# plain run (one testcase on the GPUs) loads neither (issue 36, its start-up)
if TYPE_CHECKING:
    from gpubw.acceptance.expect import Expectations
    from gpubw.acceptance.soak import SoakRecorder

BUILTIN = "builtin"


def _where(size: int | None, key: str) -> str:
    return key + (f" ({format_size(size)})" if size is not None else "")


@attrs.frozen
class Judging:
    """How a run is judged: against ``expectations`` (or, ``builtin``, the built-in ones for
    the devices, found when the System opens), the peer-outlier and noise rules."""

    expectations: Expectations | None = None
    builtin: bool = False
    outlier_pct: float | None = DEFAULT_OUTLIER_PCT
    cv_threshold: float | None = DEFAULT_CV_THRESHOLD
    #: --soak: a cell whose figure fell more than this fraction from the first repetition to
    #: the last fails (rule soak_drop); None: not judged
    soak_drop: float | None = None


class RunWatch(RunListener):
    """A run's listener (see the module docstring): the NVML facts around the run (``facts``;
    off for a simulated rack) and, with ``judging``, the verdicts on each testcase as it
    finishes and on the whole run at its end."""

    def __init__(
        self,
        judging: Judging | None = None,
        *,
        facts: bool = True,
        wait_idle_s: float | None = None,
        sample_every_s: float = POLL_S,
    ) -> None:
        self.judging = judging
        self.facts = facts
        #: --wait-idle: before each testcase, wait at most this long for idle GPUs
        self.wait_idle_s = wait_idle_s
        self.sample_every_s = sample_every_s
        self.sampler: ProcessSampler | None = None
        self.soak: SoakRecorder | None = None
        #: warnings and notes of --wait-idle, in order
        self.wait_notes: list[str] = []
        self.backend: Any = None
        self.start: NodeFacts | None = None
        #: the facts as the System closed (None until then)
        self.end: NodeFacts | None = None
        self.devices: list[dict[str, Any]] = []
        self.builtin: Expectations | None = None
        #: the run's own processes (this one; once the System is open, every rank of the
        #: run on this host), which the process checks leave out
        self.own = process_ids()
        #: the run's trace (--trace): where the NVML reads' time goes
        self.trace: Tracer = NO_TRACE
        self._no_processes = False
        #: (ordinal, pids) -> ["start of key (size)", ...]
        self._seen: dict[tuple[int, tuple[int, ...]], list[str]] = {}

    # -- the run's events ---------------------------------------------------------------
    def run_started(self, header: Report, system: Any) -> Report:
        """The System is open: its devices, the built-in expectations for them (a
        UsageError when there are none: the run stops before it begins), the facts at the
        start (in the header's device records); the facts at the end are read as it
        closes."""
        if not self.facts:
            return header
        self.backend = system.backend
        self.trace = getattr(system, "trace", NO_TRACE)
        self.own = self.own | system.world.host_pids
        self.devices = [
            {
                "ordinal": d.ordinal,
                "name": d.name,
                "pci_bus_id": d.pci_bus_id,
                "uuid": d.uuid,
                "pci_device_id": d.pci_device_id,
            }
            for d in system.devices
        ]
        if self.judging is not None and self.judging.builtin:
            self.builtin = resolve_builtin(self.devices)
        if self.judging is not None and (self.builtin or self.judging.expectations):
            exp = self.builtin or self.judging.expectations
            assert exp is not None
            spec = BUILTIN if self.builtin else exp.source
            refuse_run_sizes(exp, system.options.buffer_sizes, spec)
        with self.trace.span("nvml"):
            self.start = _facts(self.backend)
        #: the GPUs of this run (--devices): the ones waited for and watched
        self.watched = [d for d in self.devices if system.selected(d["ordinal"])]
        self.sampler = ProcessSampler(self.backend.gpu_processes, self.watched, self.own,
                                      self.sample_every_s)  # fmt: skip
        self.sampler.start()
        if system.options.soak_s is not None:
            from gpubw.acceptance.soak import SoakRecorder

            self.soak = SoakRecorder(system.options.soak_s, self.devices,
                                     lambda: _facts(self.backend), self.backend.clock)  # fmt: skip
            self.soak.start()
        system.before_close(self._read_end)
        if self.start is None:
            return header
        devices = self._with_facts(header.devices, self.start, "nvml")
        # the node's facts too, for a writer's header (nvbandwidth v0.10's CC line)
        return attrs.evolve(header, devices=devices, nvml=_node_record(self.start))

    def _read_end(self) -> None:
        """The facts at the end of the run, read as the System closes: in the session that
        is still open (after the close a new one costs nvmlInit and every handle again);
        the process sampler stopped, a soak's last sample taken."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.soak is not None:
            self.soak.finish()
        with self.trace.span("nvml"):
            self.end = _facts(self.backend)

    def testcase_started(self, step: Step) -> None:
        if self.backend is None:
            return
        where = _where(step.size, step.key)
        if self.soak is not None and step.repetition is not None:
            self.soak.before(step.repetition)
        if self.wait_idle_s is not None:
            self._wait_idle(where)
        self._check_processes(f"start of {where}")
        if self.sampler is not None:
            self.sampler.during(f"during {where}")

    def _wait_idle(self, where: str) -> None:
        """--wait-idle: wait (bounded) for the watched GPUs to be idle; a warning when the
        bound was reached, a note when it waited."""
        waited = wait_idle(self.backend, self.watched, self.own, self.wait_idle_s or 0.0)
        by_ordinal = {d["ordinal"]: d for d in self.watched}
        for ordinal, pids in waited.busy.items():
            d = by_ordinal[ordinal]
            ids = ", ".join(x for x in (d["pci_bus_id"], d["uuid"]) if x)
            self.wait_notes.append(
                f"WARNING: GPU {ordinal} ({ids}): waited {waited.seconds:.1f} s (--wait-idle) "
                f"before {where}, other compute process(es) still on it, pid "
                f"{', '.join(map(str, pids))}; went on: figures involving this GPU may be low"
            )
        if waited.seconds > 0 and not waited.busy:
            self.wait_notes.append(
                f"NOTE: waited {waited.seconds:.1f} s (--wait-idle) before {where} until no "
                "other program computed on the GPUs"
            )

    def testcase_finished(self, finished: Finished, so_far: Report) -> Finished:
        step = finished.step
        if self.sampler is not None:
            self.sampler.during("")
        if self.backend is not None:
            self._check_processes(f"end of {_where(step.size, step.key)}")
        if self.judging is None:
            return finished
        return attrs.evolve(finished, verdicts=self.verdicts_of(finished.result))

    def run_finished(self, report: Report) -> Report:
        """The Report with the facts and process warnings (:meth:`finish`), judged."""
        if self.facts:
            report = self.finish(report)
        if self.judging is None:
            return report
        j = self.judging
        exp = self.builtin if j.builtin else j.expectations
        return judge(
            report, exp, j.outlier_pct, j.cv_threshold, own=self.own, soak_drop=j.soak_drop
        )

    def _with_facts(
        self, devices: Sequence[Mapping[str, Any]], facts: NodeFacts | None, key: str
    ) -> list[dict[str, Any]]:
        """Copies of the device records with ``facts`` under ``key`` (gpubw's own process
        left out of the processes)."""
        out = [dict(d) for d in devices]
        of = match_devices(facts, out) if facts is not None else {}
        for pos, d in enumerate(out):
            f = of.get(int(d.get("ordinal", pos)))
            if f is not None:
                kept = tuple(p for p in f.processes if p.pid not in self.own)
                d[key] = attrs.evolve(f, processes=kept).as_dict()
        return out

    def verdicts_of(self, result: Any) -> tuple[Any, ...]:
        """The verdicts on one finished testcase (fail and warn), as :func:`judge` gives
        them for the whole run: every rule works within one matrix, so the same."""
        if self.judging is None:
            return ()
        j = self.judging
        exp = self.builtin if j.builtin else j.expectations
        devices = self._with_facts(self.devices, self.start, "nvml")
        one = Report("gpubw", "", "", False, "", "", {}, devices=devices, testcases=(result,))
        try:
            return judge(one, exp, j.outlier_pct, j.cv_threshold, own=self.own).verdicts
        except Exception:  # printing early is a courtesy; the summary at the end decides
            return ()

    def _check_processes(self, moment: str) -> None:
        if self._no_processes:
            return
        try:
            with self.trace.span("nvml"):
                procs = self.backend.gpu_processes()
        except Exception:  # a fact is not worth a failed run
            procs = None
        if procs is None:  # NVML cannot say: do not ask again before every testcase
            self._no_processes = True
            return
        for d in self.devices:
            others = tuple(p for p in procs.get(d["pci_bus_id"], ()) if p not in self.own)
            if others:
                self._seen.setdefault((d["ordinal"], others), []).append(moment)

    def finish(self, report: Report) -> Report:
        """The Report with the facts in its device records and the process warnings."""
        if self.backend is None:
            return report
        end = self.end if self.end is not None else _facts(self.backend)
        devices = self._with_facts(report.devices, self.start, "nvml")
        devices = self._with_facts(devices, end, "nvml_end")
        if self.sampler is not None:
            self.sampler.stop()
        warnings = list(report.warnings)
        warnings += self.wait_notes
        warnings += self.process_warnings()
        node = self.start or end
        record = None
        if node is not None:
            record = _node_record(node)
            if not node.available:
                warnings.append(f"NVML facts not available: {node.reason}")
        soak = None
        if self.soak is not None:
            soak = self.soak.record(self.judging.soak_drop if self.judging else None)
        return attrs.evolve(report, devices=devices, warnings=warnings, nvml=record, soak=soak)

    def process_warnings(self) -> list[str]:
        """One warning per GPU and set of other processes, naming when they were seen (at a
        testcase's start or end, or by the sampler during one)."""
        out = []
        by_ordinal = {d["ordinal"]: d for d in self.devices}
        for (ordinal, pids), moments in self._sightings().items():
            d = by_ordinal[ordinal]
            ids = ", ".join(x for x in (d["pci_bus_id"], d["uuid"]) if x)
            more = f"; ... {len(moments) - 4} more" if len(moments) > 4 else ""
            # "at the start of X", "at the end of X", or the sampler's "during X"
            said = [m if m.startswith("during ") else f"at the {m}" for m in moments[:4]]
            shown = "; ".join(said) + more
            out.append(
                f"WARNING: GPU {ordinal} ({ids}): other compute process(es) on it, pid "
                f"{', '.join(map(str, pids))}, {shown}: figures involving this GPU "
                "may be low"
            )
        return out

    def _sightings(self) -> dict[tuple[int, tuple[int, ...]], list[str]]:
        """The start and end checks' sightings, and the sampler's of a testcase during which
        the same processes were not already seen at its start or end."""
        seen = {k: list(v) for k, v in self._seen.items()}
        for key, moments in (self.sampler.seen if self.sampler is not None else {}).items():
            known = seen.setdefault(key, [])
            for moment in moments:
                where = moment.removeprefix("during ")
                if f"start of {where}" not in known and f"end of {where}" not in known:
                    known.append(moment)
        return {k: v for k, v in seen.items() if v}


def _node_record(node: Any) -> dict[str, Any]:
    """The report's ``nvml``: the node's facts, not its devices', without unknown ones."""
    return {k: v for k, v in node.as_dict().items() if k != "devices" and v is not None}


def _facts(backend: Any) -> NodeFacts | None:
    try:
        facts = backend.node_facts()
    except Exception as exc:  # never fail a run for a fact
        return NodeFacts(False, f"reading NVML facts failed: {exc}")
    return facts if isinstance(facts, NodeFacts) else None


# -- expectations and verdicts ---------------------------------------------------------------


def resolve_builtin(devices: Sequence[Mapping[str, Any]]) -> Expectations:
    """The built-in expectations for these devices; UsageError naming the devices and the
    built-ins when none fits."""
    from gpubw.acceptance.expect import builtin_expectations, builtin_for

    probe = Report("gpubw", "", "", False, "", "", {}, devices=list(devices))
    exp = builtin_for(probe)
    if exp is None:
        names = sorted({_named(d) for d in devices}) or ["no devices"]
        have = "; ".join(f"{e.name} ({_ids(e)})" for e in builtin_expectations())
        raise UsageError(
            f"--expect builtin: no built-in expectations for {', '.join(names)} (built-in: "
            f"{have or 'none'}); give an expectations file (gpubw expect-from REPORT -o FILE "
            "makes one from a known-good run)"
        )
    return exp


def _ids(exp: Expectations) -> str:
    """The PCI device ids a built-in file is for (its device names where it has none)."""
    return ", ".join(f"0x{i:04x}" for i in exp.pci_device_ids) or ", ".join(exp.devices)


def _named(device: Mapping[str, Any]) -> str:
    """A device for a message: its name and PCI device id."""
    pid = device.get("pci_device_id")
    return str(device.get("name", "?")) + (f" (0x{pid:04x})" if isinstance(pid, int) else "")


def load(spec: str | None, report: Report | None = None) -> Expectations | None:
    """``--expect`` value -> Expectations: None, ``builtin`` (needs ``report`` for the
    device names) or a file path."""
    if spec is None:
        return None
    if spec == BUILTIN:
        if report is None:
            raise ValueError("builtin expectations need the report's devices")
        return resolve_builtin(report.devices)
    from gpubw.acceptance.expect import load_expectations

    return load_expectations(spec)


def _by_ordinal(report: Report) -> dict[int, Mapping[str, Any]]:
    return {int(d.get("ordinal", i)): d for i, d in enumerate(report.devices)}


def _suspects_of(
    by_ordinal: Mapping[int, Mapping[str, Any]], v: Any, own: frozenset[int]
) -> tuple[str, ...]:
    out: list[str] = []
    for e in v.devices:
        rec = by_ordinal.get(e.index)
        if rec is None:
            continue
        start, end = device_facts(rec, "nvml"), device_facts(rec, "nvml_end")
        if start is not None and end is not None:  # a counter that rose: the first suspect
            out += [f"GPU {e.index}: {s}" for s in counter_suspects(start, end)]
        for f in (start, end):
            if f is None:
                continue
            f = attrs.evolve(f, processes=tuple(p for p in f.processes if p.pid not in own))
            for s in suspects(f, v.link):
                text = f"GPU {e.index}: {s}"
                if text not in out:
                    out.append(text)
    return tuple(out)


def _explained(by_ordinal: Mapping[int, Mapping[str, Any]], v: Any, own: frozenset[int]) -> Any:
    """A failed verdict with the facts that can explain it after its own suspects."""
    more = [s for s in _suspects_of(by_ordinal, v, own) if s not in v.suspects]
    return attrs.evolve(v, suspects=(*v.suspects, *more))


def peer_links(report: Report) -> dict[tuple[int, int], str] | None:
    """(i, j) -> "nvlink"/"pcie" from the devices' NVML facts; None when unknown."""
    facts = {}
    for i, d in enumerate(report.devices):
        f = device_facts(d)
        if f is None:
            return None
        facts[int(d.get("ordinal", i))] = f
    if len(facts) < 2:
        return None
    out = {}
    for a, fa in facts.items():
        for b in facts:
            if a != b:
                peers = fa.nvlink.peers if fa.nvlink is not None else ()
                nvml_index = facts[b].index
                out[(a, b)] = "nvlink" if nvml_index in peers else "pcie"
    return out


def judge(
    report: Report,
    expectations: Expectations | None,
    outlier_pct: float | None = DEFAULT_OUTLIER_PCT,
    cv_threshold: float | None = DEFAULT_CV_THRESHOLD,
    *,
    own: frozenset[int] = frozenset(),
    soak_drop: float | None = None,
) -> Report:
    """The Report with ``verdicts`` (fail and warn only; the facts that can explain a failed
    cell in its ``suspects``) and ``expectations`` (what it was judged against). With
    ``soak_drop``, a soak's cells whose figure fell more than that from the first
    repetition to the last fail too (:func:`gpubw.acceptance.soak.soak_verdicts`)."""
    from gpubw.acceptance.expect import FAIL, coverage, evaluate
    from gpubw.acceptance.soak import soak_verdicts

    links = peer_links(report)
    verdicts = evaluate(report, expectations, outlier_pct, cv_threshold, peer_links=links)
    if soak_drop is not None:
        verdicts += soak_verdicts(report, soak_drop)
    devices = _by_ordinal(report)
    verdicts = [_explained(devices, v, own) if v.severity == FAIL else v for v in verdicts]
    record: dict[str, Any] = {
        "name": expectations.name if expectations else "",
        "source": expectations.source if expectations else "",
        "outlier_pct": outlier_pct,
        "cv_threshold": cv_threshold,
    }
    if soak_drop is not None:
        record["soak_drop"] = soak_drop
    if expectations is not None:
        record["not_judged"] = list(coverage(report, expectations, links).not_judged)
    return attrs.evolve(report, verdicts=verdicts, expectations=record)


def _sizes(sizes: Sequence[int]) -> str:
    return ", ".join(format_size(x) for x in sizes)


def refuse_unjudged(report: Report, expectations: Expectations, spec: str) -> None:
    """``gpubw check``: a UsageError when ``expectations`` have rules for a testcase of the
    report only at other buffer sizes (or the report has none: nvbandwidth's JSON), so no
    floor judges it: a check that judged nothing must not read PASS."""
    from gpubw.acceptance.expect import coverage

    found = coverage(report, expectations, peer_links(report))
    if not found.wrong_size:
        return
    sized = any(t.size for t in report.testcases)
    where = "is at other sizes" if sized else (
        "records no buffer size (nvbandwidth's JSON does not)")  # fmt: skip
    more = f" and {len(found.wrong_size) - 3} more" if len(found.wrong_size) > 3 else ""
    raise UsageError(
        f"--expect {spec}: {expectations.name} has floors for {', '.join(found.wrong_size[:3])}"
        f"{more} only at {_sizes(found.rule_sizes) or 'other sizes'}, and the report {where}, "
        "so nothing would be judged; check a report measured at that size, or give "
        "expectations made from a known-good report like this one (gpubw expect-from "
        "GOOD.json -o FILE)"
    )


def _option(size: int) -> str:
    """A size as ``-b`` takes it: 512M."""
    return f"{size >> 20}M" if size % (1 << 20) == 0 else str(size)


def refuse_run_sizes(expectations: Expectations, sizes: Sequence[int], spec: str) -> None:
    """A run's ``--expect``: a UsageError before the run when the expectations' floors are
    all for sizes the run does not measure (the built-in ones: 512 MiB only)."""
    rule_sizes = {r.size for r in expectations.rules if r.size is not None}
    if rule_sizes and not rule_sizes & set(sizes):
        raise UsageError(
            f"--expect {spec}: the floors of {expectations.name} are for "
            f"{_sizes(sorted(rule_sizes))} buffers and this run measures {_sizes(sizes)}: "
            f"add -b {_option(min(rule_sizes))}, or give expectations made at this size "
            "(gpubw expect-from REPORT -o FILE)"
        )


# -- gpubw info ------------------------------------------------------------------------------


@attrs.frozen
class NodeInfo:
    """What ``gpubw info`` shows: the devices' records, the NVML facts, and for each ordered
    pair (a, b) whether a can access b's memory and over which link."""

    simulated: bool
    system_name: str
    versions: dict[str, Any]
    devices: tuple[dict[str, Any], ...]
    facts: NodeFacts
    #: (a, b) -> "NV18" (NVLink, 18 links), "PCIe" (peer access over PCIe), "X" (itself) or
    #: "-" (no peer access)
    links: dict[tuple[int, int], str]
    #: a twin's inferred model (what ``--simulate REPORT`` built from the report: plain
    #: data, bytes/s and seconds); None for anything else
    twin: dict[str, Any] | None = None


def info(system: Any) -> NodeInfo:
    """Describe the node of an open System (nothing is allocated or enabled)."""
    from gpubw.model.report_io import device_record

    backend = system.backend
    facts = _facts(backend) or NodeFacts(False, "no facts")
    records = [device_record(d) for d in system.devices]
    of = match_devices(facts, records) if facts.available else {}
    for r in records:
        if r["ordinal"] in of:
            r["nvml"] = of[r["ordinal"]].as_dict()
    links: dict[tuple[int, int], str] = {}
    for a in system.devices:
        for b in system.devices:
            i, j = a.ordinal, b.ordinal
            if i == j:
                links[(i, j)] = "X"
                continue
            if not backend.can_access_peer(i, j):
                links[(i, j)] = "-"
                continue
            fa, fb = of.get(i), of.get(j)
            nv = fa.nvlink if fa is not None else None
            if nv is not None and fb is not None and fb.index in nv.peers:
                links[(i, j)] = f"NV{nv.links_active}"
            else:
                links[(i, j)] = "PCIe"
    return NodeInfo(
        simulated=bool(backend.simulated),
        system_name=getattr(getattr(backend, "model", None), "name", ""),
        versions=dict(backend.versions()),
        devices=tuple(records),
        facts=facts,
        links=links,
        twin=_twin(backend),
    )


def _twin(backend: Any) -> dict[str, Any] | None:
    """What a twin's model inferred from its report (None for any other system)."""
    model = getattr(backend, "model", None)
    origin = getattr(model, "origin", None)
    summary = getattr(origin, "summary", None)
    return None if summary is None else dict(summary(model))


def info_to_dict(node: NodeInfo) -> dict[str, Any]:
    """``gpubw info -j``: plain JSON data."""
    from gpubw.model.report_io import json_safe

    n = len(node.devices)
    doc: dict[str, Any] = json_safe(
        {
            "schema_version": schemas.VERSIONS[schemas.INFO],
            "tool": "gpubw",
            "simulated": node.simulated,
            "system_name": node.system_name,
            "versions": node.versions,
            "nvml": {k: v for k, v in node.facts.as_dict().items() if k != "devices"},
            "devices": list(node.devices),
            "links": [[node.links.get((a, b), "?") for b in range(n)] for a in range(n)],
            **({} if node.twin is None else {"twin": node.twin}),
        }
    )
    return doc
