"""gpubw.runner.simulation: --simulate resolved once, the same for the command and the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpubw
from gpubw.cli import command as cli
from gpubw.model.errors import UsageError
from gpubw.model.options import RunOptions
from gpubw.runner.simulation import Simulation, opener, resolve_simulation
from gpubw.world.simulated import SimulatedCluster

INJECTED = "stream_copy failed (injected fault)"


def _fault_file(tmp_path: Path, kernel: str) -> Path:
    path = tmp_path / f"{kernel}.json"
    path.write_text(json.dumps({"base": "h200x1", "faults": {"kernel_error": kernel}}))
    return path


@pytest.mark.parametrize(("kernel", "size"), [("stream_copy", "1MiB"), ("stream_copy_flat", None)])
def test_a_plugin_kernel_fault_fires_through_the_command_and_the_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kernel: str, size: str | None
) -> None:
    """A system file whose fault names a plugin's kernel (gpubw-stream's, installed here) is
    accepted by the command and by gpubw.run alike, and the fault fires in both: the same
    Error naming the injected failure (the command once refused the file as naming no known
    kernel, and the API's run passed at the default size)."""
    path = _fault_file(tmp_path, kernel)
    sizes = ["-b", size] if size else []
    code = cli.main(["--simulate", str(path), "-t", "stream_copy", "-i", "1", *sizes, "-q", "-j"])
    (command,) = json.loads(capsys.readouterr().out)["testcases"]
    report = gpubw.run(["stream_copy"], simulate=path, samples=1, sizes=size)
    (api,) = report.testcases
    assert code == report.exit_code == 1
    assert command["status"] == api.status.value == "Error"
    assert kernel.replace("_flat", "") in api.message and command["message"] == api.message
    assert "injected fault" in api.message


def test_a_bad_simulation_is_one_usage_error() -> None:
    """An unknown preset names the presets; a missing file says it cannot be read."""
    with pytest.raises(UsageError, match=r"presets: .*h200x2"):
        resolve_simulation("no-such-preset")
    with pytest.raises(UsageError, match="cannot read simulated system file"):
        resolve_simulation("/nonexistent/system.json")
    assert resolve_simulation(None) is None


def test_the_opener_makes_the_system_for_its_world() -> None:
    """The System is made in the world it is given, and never re-targeted: a host's second
    rank drives only its own device."""
    simulation = resolve_simulation("h200x2")
    assert isinstance(simulation, Simulation) and simulation.hosts is None
    _first, second = SimulatedCluster([2]).worlds()
    with opener(simulation)(RunOptions(), second) as system:
        assert system.world is second and system.driven_devices == (1,)
        with pytest.raises(AttributeError):
            system.world = _first  # type: ignore[misc]


# -- simulated racks (issue 23): the multinode testcases on ranks that take turns ----------
def _rack(n: int) -> Simulation:
    """The first ``n`` GPUs of the gb200nvl72 preset (hosts of 4), as ``--simulate
    gb200nvl72`` runs them: every rank emulated in this process."""
    import attrs

    from gpubw.backend.sim.presets import GB200_PER_HOST, gb200nvl72

    full = gb200nvl72()
    model = attrs.evolve(
        full,
        devices=full.devices[:n],
        host_links=full.host_links[:n],
        peers={p: r for p, r in full.peers.items() if max(p) < n},
        hosts=(GB200_PER_HOST,) * (n // GB200_PER_HOST),
    )
    return Simulation("gb200nvl72", model)


_CI = RunOptions(samples=1, loops=2, buffer_sizes=(1 << 20,))


def _rack_run(n: int, options: RunOptions, **spec: object) -> gpubw.Report:
    from gpubw.runner import core
    from gpubw.runner.spec import RunSpec, select

    selection, _ = select([], ["multinode"])
    return core.run(RunSpec(selection, options, simulation=_rack(n), **spec))  # type: ignore[arg-type]


def test_a_rack_runs_every_multinode_cell_at_ci_sizes_within_a_bound() -> None:
    """``--simulate gb200nvl72 -p multinode`` at CI sizes (8 GPUs on 2 hosts, 1 MiB, one
    sample), every cell: every testcase Passed, marked simulated, well within 300 s."""
    import time

    start = time.monotonic()
    report = _rack_run(8, _CI)
    assert time.monotonic() - start < 300
    assert {t.status.value for t in report.testcases} == {"Passed"}
    assert len(report.testcases) == 13 and report.simulated
    first = report.testcases[0].matrices[0]
    assert sum(v is not None for row in first.values for v in row) == 8 * 7


def test_a_rack_gives_the_same_figures_for_the_same_seed() -> None:
    """Ranks take turns in a fixed order: two runs of one seed give the same figures."""
    options = RunOptions(samples=2, loops=2, buffer_sizes=(1 << 20,), sample_pairs=8, seed=5)
    one, two = (_rack_run(8, options) for _ in range(2))
    assert [m.values for t in one.testcases for m in t.matrices] == [
        m.values for t in two.testcases for m in t.matrices
    ]


@pytest.mark.parametrize(("signame", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_the_first_signal_interrupts_a_rack_run(signame: str, code: int) -> None:
    """The first SIGINT/SIGTERM, sent while rank 0 starts the second testcase, interrupts
    that testcase as in one process: the report is complete (the first testcase kept, the
    second Interrupted, as far as the run went), valid JSON, signalled, exit 130/143."""
    import os
    import signal

    from gpubw.api import report_to_json
    from gpubw.model.events import RunListener

    signum = signal.Signals[signame]

    class KillAtSecond(RunListener):
        def __init__(self) -> None:
            self.started = 0

        def testcase_started(self, step: object) -> None:
            self.started += 1
            if self.started == 2:
                os.kill(os.getpid(), signum)

    report = _rack_run(8, _CI, listeners=(KillAtSecond(),), handle_signals=True)
    statuses = [t.status.value for t in report.testcases]
    assert statuses == ["Passed", "Interrupted"]
    assert report.signal == signame and report.exit_code == code
    assert json.loads(report_to_json(report))["testcases"][1]["status"] == "Interrupted"
