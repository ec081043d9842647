"""Confidential Computing: NVML's CC state read, shown by info and the report, and the host
<-> device testcases that nvbandwidth v0.10's CC filter waives."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from _cli import run_cli, usage_error
from gpubw.hw import nvml_read
from gpubw.model import schemas
from test_nvml import NotSupported, fake_pynvml

REASON = "bounce-buffer confidential computing enabled"
#: waived under CC (docs/compatibility.md, "Confidential Computing")
WAIVED = (
    "host_to_device_bidirectional_memcpy_ce",
    "device_to_host_bidirectional_memcpy_ce",
    "all_to_host_bidirectional_memcpy_ce",
    "host_to_all_bidirectional_memcpy_ce",
    "host_device_latency_sm",
)
#: host <-> device testcases that still run under CC
RUN = (
    "host_to_device_memcpy_ce",
    "device_to_host_memcpy_ce",
    "host_to_device_bidirectional_memcpy_sm",
    "all_to_host_memcpy_ce",
    "device_local_copy",
)


def _system(tmp_path: Path, nvml: dict[str, Any] | None) -> str:
    path = tmp_path / "cc.json"
    doc: dict[str, Any] = {"base": "h200x2"}
    if nvml is not None:
        doc["nvml"] = nvml
    path.write_text(json.dumps(doc))
    return str(path)


def _statuses(capsys: Any, system: str) -> dict[str, tuple[str, str]]:
    code, out, err = run_cli(capsys, "--simulate", system, "-j", "-t", *WAIVED, *RUN)
    assert code == 0, err
    report = json.loads(out)
    assert not schemas.errors(schemas.REPORT, report, closed=True)
    return {t["key"]: (t["status"], t["message"]) for t in report["testcases"]}


def test_cc_waives_the_bounce_buffer_testcases_and_runs_the_others(capsys, tmp_path):
    """nvml.confidential_compute: the five testcases Waived with v0.10's reason, others run."""
    got = _statuses(capsys, _system(tmp_path, {"confidential_compute": True}))
    assert {k: got[k] for k in WAIVED} == {k: ("Waived", REASON) for k in WAIVED}
    assert all(got[k][0] == "Passed" for k in RUN), got


@pytest.mark.parametrize("nvml", [None, {"confidential_compute": False}])
def test_without_cc_nothing_is_waived(capsys, tmp_path, nvml):
    """No CC (absent or false): every one of those testcases runs."""
    got = _statuses(capsys, _system(tmp_path, nvml))
    assert all(status == "Passed" for status, _ in got.values()), got


def test_cc_state_in_the_report(capsys, tmp_path):
    """The report's node facts carry the state."""
    system = _system(tmp_path, {"confidential_compute": True})
    code, out, _ = run_cli(capsys, "--simulate", system, "-j", "-t", "host_to_device_memcpy_ce")
    assert code == 0 and json.loads(out)["nvml"]["confidential_compute"] is True


@pytest.mark.parametrize(
    ("nvml", "words", "value"),
    [
        ({"confidential_compute": True}, "Confidential Computing: on. Detected platform "
         "using encrypted bounce buffers for CPU<->GPU traffic.", True),
        (None, "Confidential Computing: off", False),
    ],
)  # fmt: skip
def test_info_shows_the_state(capsys, tmp_path, nvml, words, value):
    """gpubw info: one line in the text, nvml.confidential_compute in -j (schema-valid)."""
    system = _system(tmp_path, nvml)
    code, out, _ = run_cli(capsys, "info", "--simulate", system)
    assert code == 0 and words in out.splitlines()
    code, out, _ = run_cli(capsys, "info", "--simulate", system, "-j")
    doc = json.loads(out)
    assert code == 0 and doc["nvml"]["confidential_compute"] is value
    assert not schemas.errors(schemas.INFO, doc, closed=True)


def test_a_wrong_cc_value_is_refused(capsys, tmp_path):
    """A system file's confidential_compute that is no boolean: one line naming it."""
    line = usage_error(capsys, "--simulate", _system(tmp_path, {"confidential_compute": "yes"}))
    assert "nvml.confidential_compute must be true or false, got 'yes'" in line


def _settings_module(feature: int | None, state: int | None) -> types.ModuleType:
    """A pynvml stand-in with the CC queries: ``None`` makes a query NOT_SUPPORTED."""
    import pynvml

    m = fake_pynvml()
    m.NVML_CC_SYSTEM_FEATURE_ENABLED = 1
    m.c_nvmlSystemConfComputeSettings_v1_t = pynvml.c_nvmlSystemConfComputeSettings_v1_t
    m.nvmlSystemConfComputeSettings_v1 = pynvml.nvmlSystemConfComputeSettings_v1

    def settings(ref: Any) -> int:
        if feature is None:
            return 3  # NVML_ERROR_NOT_SUPPORTED, as the raw call returns it
        assert ref._obj.version == pynvml.nvmlSystemConfComputeSettings_v1
        ref._obj.ccFeature = feature
        return 0

    def cc_state() -> Any:
        if state is None:
            raise NotSupported()
        return types.SimpleNamespace(environment=0, ccFeature=state, devToolsMode=0)

    m.nvmlSystemGetConfComputeSettings = settings
    m.nvmlSystemGetConfComputeState = cc_state
    return m


@pytest.mark.parametrize(
    ("feature", "state", "expected"),
    [(1, None, True), (0, 1, False), (None, 1, True), (None, 0, False), (None, None, None)],
)
def test_nvml_reading(feature, state, expected):
    """The settings query first, else the older state query; neither: unknown (None)."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    if not hasattr(pynvml, "c_nvmlSystemConfComputeSettings_v1_t"):
        pytest.skip("this nvidia-ml-py (the minimum, 11.510) has no Confidential Computing API")
    facts = nvml_read.read_facts(_settings_module(feature, state))
    assert facts.available and facts.confidential_compute is expected


def test_an_old_module_without_the_queries_is_unknown():
    """A pynvml without the CC names: unknown, no error, the other facts read."""
    facts = nvml_read.read_facts(fake_pynvml())
    assert facts.available and facts.confidential_compute is None and facts.devices


@pytest.mark.parametrize(
    ("version", "cc", "shown"), [("0.10", True, True), ("0.10", False, False), ("0.8", True, False)]
)
def test_the_v010_flavour_says_the_platform_uses_bounce_buffers(
    capsys: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    cc: bool,
    shown: bool,
) -> None:
    """v0.10's drop-in prints the CC line (then a blank one) after the CUDA lines, before the
    host name, as the real v0.10 log does; v0.8 and a node without CC do not."""
    from gpubw.cli.nvbandwidth import main
    from gpubw.hw.nvml import CC_BOUNCE_BUFFERS

    monkeypatch.setenv("GPUBW_SIMULATE", _system(tmp_path, {"confidential_compute": cc}))
    monkeypatch.setenv("GPUBW_NVBANDWIDTH_VERSION", version)
    assert main(["-t", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (CC_BOUNCE_BUFFERS in lines) == shown
    if shown:
        at = lines.index(CC_BOUNCE_BUFFERS)
        assert lines[at - 2].startswith("Driver Version: ") and lines[at + 1 : at + 2] == [""]
