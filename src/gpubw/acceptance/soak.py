"""The soak (``--soak DURATION``): the selection repeated until the time is up, the devices'
clocks, temperature, power and throttle reasons recorded between repetitions, and a verdict
on every cell whose figure fell from the first repetition to the last.

* :class:`SoakRecorder` (driven by :class:`gpubw.acceptance.node.RunWatch`) reads the NVML
  facts before each repetition and once after the last (on the backend's clock: a simulated
  soak runs in modelled time) and makes the report's ``soak`` record.
* :func:`soak_verdicts` compares each cell of the first repetition with the same cell of the
  last: a bandwidth that fell (a latency that rose) by more than ``drop`` fails (rule
  ``soak_drop``), naming why where the facts say: ``thermal`` (sw/hw thermal slowdown),
  ``power`` (power cap, power brake), the SM clock and the temperature from the first sample
  to the last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpubw.hw.nvml import NodeFacts, match_devices
from gpubw.model.results import LATENCY, Matrix, Report, Status, TestcaseResult
from gpubw.model.verdicts import FAIL, SOAK_DROP, CellPlace, Verdict, cell_places

#: throttle reasons by the kind of cause a soak names
THERMAL = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})


@attrs.define
class SoakRecorder:
    """The samples of one soak: ``read()`` gives the node's facts now, ``clock()`` the time."""

    duration_s: float
    devices: list[dict[str, Any]]
    read: Any
    clock: Any
    began: float = 0.0
    samples: list[dict[str, Any]] = attrs.Factory(list)
    repetitions: int = 0

    def start(self) -> None:
        self.began = self.clock()

    def before(self, repetition: int) -> None:
        """A sample before ``repetition`` (once per repetition)."""
        if not self.samples or repetition > self.samples[-1]["repetition"]:
            self.at(repetition)

    def finish(self) -> None:
        """The sample after the last repetition (labelled with the number of repetitions)."""
        self.repetitions = self.samples[-1]["repetition"] + 1 if self.samples else 0
        self.at(self.repetitions)

    def at(self, repetition: int) -> None:
        """A sample now, labelled ``repetition``."""
        facts = self.read()
        self.samples.append(
            {
                "repetition": repetition,
                "time_s": round(self.clock() - self.began, 6),
                "devices": device_samples(facts, self.devices),
            }
        )

    def record(self, drop: float | None) -> dict[str, Any]:
        """The report's ``soak`` record."""
        return {
            "duration_s": self.duration_s,
            "repetitions": self.repetitions,
            "drop": drop,
            "samples": list(self.samples),
        }


def device_samples(facts: NodeFacts | None, devices: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Each device's clocks, temperature, power and throttle reasons (CUDA ordinals)."""
    if facts is None or not facts.available:
        return [{"ordinal": int(d["ordinal"])} for d in devices]
    of = match_devices(facts, devices)
    out: list[dict[str, Any]] = []
    for d in devices:
        ordinal = int(d["ordinal"])
        f = of.get(ordinal)
        c = f.clocks if f is not None else None
        entry: dict[str, Any] = {"ordinal": ordinal}
        if c is not None:
            entry.update(sm_mhz=c.sm_mhz, memory_mhz=c.memory_mhz,
                         temperature_c=c.temperature_c, power_w=c.power_w,
                         reasons=list(c.reasons))  # fmt: skip
        out.append(entry)
    return out


# -- verdicts --------------------------------------------------------------------------------


def _first_and_last(report: Report) -> list[tuple[TestcaseResult, TestcaseResult]]:
    """(first, last) Passed result of each testcase and size that ran twice or more."""
    runs: dict[tuple[str, int | None], dict[int, TestcaseResult]] = {}
    for t in report.testcases:
        if t.repetition is not None and t.status is Status.PASSED:
            runs.setdefault((t.key, t.size), {})[t.repetition] = t
    return [(r[min(r)], r[max(r)]) for r in runs.values() if len(r) > 1]


def soak_verdicts(report: Report, drop: float) -> list[Verdict]:
    """A FAIL for every cell whose figure fell by more than ``drop`` (a fraction) from its
    first repetition to its last (a latency: rose), the reasons the samples show as
    suspects."""
    out = []
    for first, last in _first_and_last(report):
        later = {m.key: m for m in last.matrices}
        for m in first.matrices:
            end = later.get(m.key)
            if end is None:
                continue
            for p in cell_places(m, report.devices):
                v = _drop_verdict(report, first, last, m, end, p, drop)
                if v is not None:
                    out.append(v)
    return out


def _drop_verdict(
    report: Report,
    first: TestcaseResult,
    last: TestcaseResult,
    m: Matrix,
    end: Matrix,
    p: CellPlace,
    drop: float,
) -> Verdict | None:
    a = m.values[p.row][p.column]
    row = end.values[p.row] if p.row < len(end.values) else ()
    b = row[p.column] if p.column < len(row) else None
    if a is None or b is None:
        return None
    lower = m.unit == LATENCY
    limit = a * (1 + drop) if lower else a * (1 - drop)
    if not (b > limit if lower else b < limit):
        return None
    change = (b - a) / a
    return Verdict(
        testcase=first.key, matrix=m.key, size=first.size,
        row=m.row_labels[p.row], column=m.column_labels[p.column], link=p.link,
        source=p.source, destination=p.destination, bidirectional=p.bidirectional,
        unit=m.unit, measured=float(b), expected=limit, reference=float(a),
        rule=SOAK_DROP, severity=FAIL,
        detail=f"{change:+.1%} from repetition {first.repetition} to {last.repetition}; "
        f"allowed {'+' if lower else '-'}{drop:.0%}",
        suspects=soak_reasons(report.soak, [e.index for e in (p.source, p.destination)
                                            if e.kind == "gpu" and e.index is not None]),
    )  # fmt: skip


def soak_reasons(soak: Mapping[str, Any] | None, ordinals: Sequence[int]) -> tuple[str, ...]:
    """Why the GPUs' figures fell, from the first sample to the last: the cause (thermal,
    power) of the throttle reasons active at the end, the SM clock and the temperature."""
    samples = (soak or {}).get("samples") or []
    if len(samples) < 2:
        return ()
    first = {d["ordinal"]: d for d in samples[0].get("devices", ())}
    last = {d["ordinal"]: d for d in samples[-1].get("devices", ())}
    out = []
    for g in dict.fromkeys(ordinals):
        a, b = first.get(g, {}), last.get(g, {})
        reasons = set(b.get("reasons") or ())
        causes = [w for w, s in (("thermal", THERMAL), ("power", POWER)) if reasons & s]
        parts = []
        if causes:
            active = ", ".join(sorted(reasons & (THERMAL | POWER)))
            parts.append(f"{' and '.join(causes)} ({active})")
        if a.get("sm_mhz") and b.get("sm_mhz") and b["sm_mhz"] < a["sm_mhz"]:
            parts.append(f"SM clock {a['sm_mhz']} -> {b['sm_mhz']} MHz")
        hot = (a.get("temperature_c"), b.get("temperature_c"))
        if hot[0] is not None and hot[1] is not None and hot[1] > hot[0]:
            parts.append(f"{hot[0]} -> {hot[1]} C")
        if parts:
            out.append(f"GPU {g}: {', '.join(parts)}")
    return tuple(out)
