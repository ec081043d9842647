"""--soak: the selection repeated in modelled time, clocks recorded, a fall named and failed."""

from __future__ import annotations

import pytest

from _node import FAST, json_run, run_cli, system_file

HOT = {"base": "h200x2", "throttle": {"after_s": 3, "factor": 0.7, "devices": [1]}}


def test_a_soak_that_heats_up_fails_the_cell_and_names_thermal(capsys, tmp_path):
    """GPU 1 throttled after 3 modelled seconds: its cell falls 30 %, fails, and says why."""
    sim = system_file(tmp_path, HOT)
    code, doc, err = json_run(capsys, tmp_path, "--simulate", sim, "-t", "0", *FAST,
                              "--soak", "20s")  # fmt: skip
    assert code == 3, err
    soak = doc["soak"]
    assert soak["repetitions"] >= 2 and len(soak["samples"]) == soak["repetitions"] + 1
    assert {t["repetition"] for t in doc["testcases"]} == set(range(soak["repetitions"]))
    (v,) = doc["verdicts"]
    assert (v["rule"], v["column"]) == ("soak_drop", "1")
    assert any("thermal (hw_thermal_slowdown)" in s for s in v["suspects"])


def test_a_steady_soak_passes_and_records_clocks(capsys, tmp_path):
    """No throttle: no verdict, exit 0; every sample has each device's SM clock."""
    code, doc, err = json_run(capsys, tmp_path, "--simulate", "h200x2", "-t", "0", *FAST,
                              "--soak", "5s", "--soak-drop", "2%")  # fmt: skip
    assert code == 0, err
    assert doc["verdicts"] == [] and doc["expectations"]["soak_drop"] == 0.02
    assert all(d["sm_mhz"] for s in doc["soak"]["samples"] for d in s["devices"])


def test_the_plot_of_a_soak_shows_figure_and_clocks_over_time(capsys, tmp_path):
    """gpubw plot on a soak's report writes its soak figure beside the others."""
    pytest.importorskip("matplotlib")
    sim = system_file(tmp_path, HOT)
    _, _, err = json_run(capsys, tmp_path, "--simulate", sim, "-t", "0", *FAST, "--soak", "10s")
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "r.json"), "-o",
                           str(tmp_path / "p.png"))  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "p-soak.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--soak", "ten minutes"], "is not a duration"),
        (["--soak", "0"], "must be more than 0"),
        (["--soak", "8d"], "is not a duration"),
        (["--soak-drop", "5%"], "--soak-drop only applies with --soak"),
        (["--soak", "1m", "--soak-drop", "150%"], "must be in (0, 1)"),
    ],
)
def test_bad_soak_values_exit_2(capsys, argv, words):
    """A bad duration or threshold: one line naming it, exit 2, nothing run."""
    code, out, err = run_cli(capsys, "--simulate", "h200x2", "-t", "0", *FAST, *argv)
    assert code == 2 and words in err and "Running" not in out


def test_a_simulated_soak_is_bounded_by_the_wall_clock(tmp_path):
    """--soak 1s on a simulated system whose modelled clock stands still ends after about a
    second of wall time, with its repetitions in the report (issue 33 item 11; before: a
    simulated soak counted modelled time only: --soak 10s ran 91 s and wrote 10,367
    repetitions, and here it never ended)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    code = (
        "import sys\n"
        "from gpubw.backend.sim.backend import SimulatedBackend\n"
        "SimulatedBackend.clock = lambda self: 0.0  # modelled time stands still\n"
        "from gpubw.cli.command import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = [*FAST, "--simulate", "h200x1", "-t", "0", "--soak", "1s", "-j", "-o", str(out)]
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, encoding="utf-8", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    soak = json.loads(out.read_text())["soak"]
    assert soak["duration_s"] == 1.0 and soak["repetitions"] >= 1
