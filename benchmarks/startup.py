"""gpubw's own start-up work in a one-testcase process, phase by phase, without CUDA (issue 36).

    python3 benchmarks/startup.py [--runs 7] [--no-report]

Each run is a fresh process that does, in order and timed by wall clock, what
``gpubw -t device_local_copy -b 64 -q -j -o /dev/null`` does on the main thread up to its
first CUDA call: the command's own modules (``cli``), ``cuda.bindings.driver`` (the prestart's
import), the run's modules (``run-modules``), the command line parsed (``parse``), the run's
spec with its testcase's module (``spec``), the listeners with the JSON writer
(``listeners``), the real backend's modules and the software versions (``backend-modules``);
then what it does once the System is open: the NVML facts read around a run (``nvml``;
where NVML cannot start, its failed start) and the one-testcase report written as validated
JSON (``report``: ``device_local_copy`` of a committed H100 report). The prestart itself is
left out, so no CUDA is touched (on a GPU machine either). Measure byte-compiled, as a pip
install leaves it (``python3 -m compileall -q src`` where PYTHONDONTWRITEBYTECODE is set).

Prints, per phase, the median and range over the runs in ms, the modules it imported and the
generated methods attrs compiled for the classes it built (``attrs compiles``) with those
compiles' median ms; the sums before CUDA and after; then the wall of whole processes: ``python3 -c
pass``, ``gpubw -l`` and the one-testcase command itself (without a GPU it ends in the
no-driver error, so only with one is that the real figure). Exits 0.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "results", "suite-h100-2026-12-06e.json")
ARGV = ["-t", "device_local_copy", "-b", "64", "-q", "-j", "-o", os.devnull]
BEFORE_CUDA = ("cli", "cuda-import", "run-modules", "parse", "spec", "listeners",
               "backend-modules")  # fmt: skip
AFTER_OPEN = ("nvml", "report")


class _Compiles:
    """Counts attrs's compiles of the generated methods of the classes it builds (its calls
    of ``compile`` from ``attr._make._compile_and_eval``) and their time."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        original = builtins.compile

        def counted(*args: Any, **kwargs: Any) -> Any:
            if sys._getframe(1).f_code.co_name != "_compile_and_eval":
                return original(*args, **kwargs)
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.count += 1
                self.seconds += time.perf_counter() - t

        builtins.compile = counted  # type: ignore[assignment]


# -- the phases: each takes and fills the state of one process -----------------------------
def _cli(state: dict[str, Any]) -> None:
    import gpubw.cli  # noqa: F401


def _cuda_import(state: dict[str, Any]) -> None:
    with contextlib.suppress(ImportError):
        import cuda.bindings.driver  # noqa: F401


def _run_modules(state: dict[str, Any]) -> None:
    from gpubw.backend import cuda_start
    from gpubw.cli import run

    cuda_start.prestart = lambda *a, **k: False  # no CUDA: only gpubw's own work is timed
    state["run"] = run


def _parse(state: dict[str, Any]) -> None:
    state["ns"], state["setup"] = state["run"]._setup(list(ARGV))


def _spec(state: dict[str, Any]) -> None:
    from gpubw.runner.interrupts import SignalGuard
    from gpubw.world import world_from_environment

    run = state["run"]
    state["world"] = world_from_environment()
    state["spec"], state["judging"], _ = run._agreed_spec(
        state["ns"], list(ARGV), state["setup"], state["world"], SignalGuard(), run.GPUBW
    )


def _listeners(state: dict[str, Any]) -> None:
    s = state
    s["run"]._listeners(s["ns"], s["spec"], s["judging"], s["setup"].output, s["world"])


def _backend_modules(state: dict[str, Any]) -> None:
    import gpubw.backend.cuda  # noqa: F401
    from gpubw.runner.state import software_versions

    software_versions({})


def _nvml(state: dict[str, Any]) -> None:
    from gpubw.hw.nvml_read import Session

    with Session() as session:
        session.facts()


def _report(state: dict[str, Any]) -> None:
    from gpubw.runner.writer_registry import Writers
    from gpubw.writers import make_writer

    writer = make_writer(Writers.discover().get("json"))
    with open(os.devnull, "w", encoding="utf-8") as stream:
        writer.write(state["report"], stream)


PHASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "cli": _cli, "cuda-import": _cuda_import, "run-modules": _run_modules, "parse": _parse,
    "spec": _spec, "listeners": _listeners, "backend-modules": _backend_modules,
    "nvml": _nvml, "report": _report,
}  # fmt: skip


def _h100_report() -> Any:
    """``device_local_copy`` of a real H100 run's report (committed in benchmarks/results),
    rebuilt without the schema check: made untimed, before the report phase."""
    from gpubw.model.report_io import report_from_dict

    with open(REPORT, encoding="utf-8") as f:
        doc = json.load(f)
    doc["testcases"] = [t for t in doc["testcases"] if t["key"] == "device_local_copy"]
    return report_from_dict(doc)


def _child(with_report: bool) -> dict[str, list[float]]:
    """One process's phases: name -> [ms, modules imported, attrs compiles, their ms]."""
    compiles = _Compiles()
    state: dict[str, Any] = {}
    out: dict[str, list[float]] = {}
    for name, work in PHASES.items():
        if name == "report":
            if not with_report:
                break
            state["report"] = _h100_report()
        modules, count, seconds = len(sys.modules), compiles.count, compiles.seconds
        t = time.perf_counter()
        work(state)
        ms = (time.perf_counter() - t) * 1e3
        out[name] = [ms, len(sys.modules) - modules, compiles.count - count,
                     (compiles.seconds - seconds) * 1e3]  # fmt: skip
    return out


def _wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - t) * 1e3


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f}  ({min(values):.1f}-{max(values):.1f})"


def _children(runs: int, with_report: bool) -> list[dict[str, list[float]]]:
    cmd = [sys.executable, __file__, "--child"] + ([] if with_report else ["--no-report"])
    out = []
    for _ in range(runs):
        done = subprocess.run(cmd, capture_output=True, encoding="utf-8", check=False)
        if done.returncode == 0:
            out.append(json.loads(done.stdout.splitlines()[-1]))
        else:
            print("a run failed:", done.stderr.strip().splitlines()[-1:], file=sys.stderr)
    return out


def _print_phases(results: list[dict[str, list[float]]]) -> None:
    print(f"# {len(results)} runs: ms median (min-max), modules imported, attrs compiles"
          " (their median ms)")  # fmt: skip
    for name in PHASES:
        rows = [r[name] for r in results if name in r]
        if rows:
            print(f"{name:16s} {_span([r[0] for r in rows])}  {int(rows[0][1]):4d} modules"
                  f"  {int(rows[0][2]):3d} attrs compiles"
                  f" ({statistics.median(r[3] for r in rows):.1f} ms)")  # fmt: skip
    for label, names in (("before CUDA", BEFORE_CUDA), ("once open", AFTER_OPEN)):
        sums = [sum(r[n][0] for n in names if n in r) for r in results]
        if sums:
            print(f"{label:16s} {_span(sums)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes (default 7)")
    parser.add_argument("--no-report", action="store_true", help="leave out the report phase")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(not args.no_report)))
        return 0
    _print_phases(_children(args.runs, not args.no_report))
    gpubw = [sys.executable, "-m", "gpubw"]
    for label, cmd in (("python3 -c pass", [sys.executable, "-c", "pass"]),
                       ("gpubw -l", [*gpubw, "-l"]),
                       ("gpubw " + " ".join(ARGV), [*gpubw, *ARGV])):  # fmt: skip
        print(f"{label:50s} {_span([_wall(cmd) for _ in range(args.runs)])} ms (whole process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
