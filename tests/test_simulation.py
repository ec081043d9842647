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
