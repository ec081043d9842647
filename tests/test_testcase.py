"""Tests of the Testcase base class: description, waive, the shared filters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpubw.memory.system import System
from gpubw.testcases.base import MULTICAST_OFF, Testcase, multicast_disabled


class _Multicast(Testcase):
    """A testcase that would use NVLink multicast.

    Second paragraph."""

    def filter(self) -> bool:
        return self.needs_multicast()


def test_description_is_the_dedented_docstring() -> None:
    """description() is the class docstring, dedented and stripped."""
    assert _Multicast.description() == (
        "A testcase that would use NVLink multicast.\n\nSecond paragraph."
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"NCCL_NVLS_ENABLE": "0"}, "NCCL_NVLS_ENABLE=0"),
        ({"NCCL_NVLS_ENABLE": "1"}, ""),
        ({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}, "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"),
        ({"GPUBW_DISABLE_MULTICAST": "1"}, "GPUBW_DISABLE_MULTICAST=1"),
        ({"NVSHMEM_DISABLE_NVLS": "1"}, "NVSHMEM_DISABLE_NVLS=1"),
        ({"NVSHMEM_DISABLE_NVLS": "0"}, ""),
        ({}, ""),
    ],
)
def test_multicast_disabled_names_the_setting(env: dict[str, str], expected: str) -> None:
    """multicast_disabled() names the variable that turns multicast off, or gives ""."""
    assert multicast_disabled(env) == expected


def test_multicast_testcase_waived_when_nccl_disables_it(
    sim_system: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL_NVLS_ENABLE=0 waives a multicast testcase, even on devices that support it."""
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    system: System = sim_system("h200x8")
    assert all(d.multicast_supported for d in system.devices)
    tc = _Multicast(system, "multicast")
    assert tc.filter() is False
    assert "NCCL_NVLS_ENABLE=0" in tc.waive_reason


def test_multicast_testcase_needs_device_support(
    sim_system: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the opt-out variables, multicast is waived unless every device supports it."""
    for name, _ in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)
    tc = _Multicast(sim_system("h200x2"), "multicast")
    assert tc.filter() is False
    assert "device(s) 0, 1 have none" in tc.waive_reason
    assert _Multicast(sim_system("h200x8"), "multicast").filter() is True


def test_the_key_is_given_at_construction(sim_system: Callable[..., Any]) -> None:
    """An instance carries the key it was made with; the class states none; a key that is
    not a non-empty str is API misuse (TypeError/ValueError), not a UsageError."""
    system = sim_system("h200x1")
    assert _Multicast(system, "one").key == "one"
    assert _Multicast(system, "two").key == "two"
    assert not hasattr(_Multicast, "key")
    with pytest.raises(TypeError, match="entry-point name"):
        _Multicast(system, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        _Multicast(system, "")
    with pytest.raises(TypeError):
        _Multicast(system)  # type: ignore[call-arg]


def test_needs_peers_waives_one_device(sim_system: Callable[..., Any]) -> None:
    """needs_peers() waives with an actionable reason on a single device."""
    tc = Testcase(sim_system("h200x1"), "peers")
    assert tc.needs_peers() is False
    assert tc.waive_reason == "needs 2 devices with peer access; found 1 device"


def test_docstring_example_imports_public_names() -> None:
    """The plugin example in gpubw.testcases.base's docstring imports only names gpubw exports."""
    import re

    import gpubw
    import gpubw.testcases.base

    lines = re.findall(r"from gpubw import ([^\n]+)", gpubw.testcases.base.__doc__ or "")
    names = {n.strip() for line in lines for n in line.split(",")}
    assert names and names <= set(gpubw.__all__), names - set(gpubw.__all__)


@pytest.mark.parametrize("flag", ["--devices", "--expect"])
def test_a_pair_testcase_with_one_selected_gpu_is_waived(capsys, tmp_path, flag):
    """--devices 0 on two GPUs: a device-to-device testcase has no pair to measure, so it is
    Waived naming the selection, not Passed with every cell null (issue 33 item 12; before:
    Passed with 0 cells, --expect builtin passing it)."""
    from _node import json_run

    judge = ["--expect", "builtin"] if flag == "--expect" else []
    size = "512MiB" if judge else "1MiB"  # the built-in floors' size (another is refused)
    argv = ["--simulate", "h200x2", "-t", "device_to_device_memcpy_read_ce", "-b", size]
    code, doc, _ = json_run(capsys, tmp_path, *argv, "-i", "1", "--devices", "0", *judge)
    (t,) = doc["testcases"]
    assert t["status"] == "Waived" and code == 0
    assert t["message"] == "needs 2 selected devices with peer access; the selection has 1 (GPU 0)"
