"""Other programs on the GPUs: --wait-idle in modelled time, and the sampler during a testcase."""

from __future__ import annotations

from _node import FAST, json_run, system_file
from gpubw.acceptance.processes import ProcessSampler, wait_idle
from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import load_system, system_from_dict

BUS0 = "0000:1b:00.0"
GPU0 = [{"ordinal": 0, "pci_bus_id": BUS0}]


def backend(entry):
    """A simulated h200x2 whose GPU 0 has ``entry`` as its other processes."""
    assert load_system("h200x2").devices[0].pci_bus_id == BUS0
    return SimulatedBackend(system_from_dict({"base": "h200x2", "other_processes": {"0": entry}}))


def test_wait_idle_waits_in_modelled_time_until_the_process_is_gone():
    """A process there until 2.2 s: the wait ends idle after 2.5 s (polls of 0.5 s)."""
    b = backend({"pids": [4242], "until_s": 2.2})
    waited = wait_idle(b, GPU0, frozenset(), bound_s=60)
    assert waited.busy == {} and waited.seconds == 2.5


def test_wait_idle_gives_up_at_its_bound_and_names_the_process():
    """A process that stays: the wait ends at the bound with its pid; own pids never count."""
    b = backend([4242])
    waited = wait_idle(b, GPU0, frozenset(), bound_s=1.2)
    assert waited.busy == {0: (4242,)} and waited.seconds == 1.2
    assert wait_idle(b, GPU0, frozenset({4242}), bound_s=1.2).busy == {}


def test_the_sampler_notes_a_process_seen_only_during_a_testcase():
    """Samples between testcases are not noted; one during a testcase names it."""
    procs: dict[str, list[int]] = {}
    sampler = ProcessSampler(lambda: procs, GPU0, frozenset({1}))
    procs[BUS0] = [1, 77]
    sampler.sample()  # between testcases: nothing
    sampler.during("during host_to_device_memcpy_ce (64 MiB)")
    sampler.sample()
    procs[BUS0] = []
    sampler.sample()
    assert sampler.seen == {(0, (77,)): ["during host_to_device_memcpy_ce (64 MiB)"]}


def test_the_sampler_survives_a_failing_query():
    """A query that raises is a missed sample, not a failed run."""

    def broken():
        raise RuntimeError("NVML went away")

    sampler = ProcessSampler(broken, GPU0, frozenset())
    sampler.during("during x")
    sampler.sample()
    assert sampler.seen == {}


def test_wait_idle_run_warns_when_the_bound_is_reached(capsys, tmp_path):
    """--wait-idle 1 with a process that stays on GPU 1: the report warns, naming the pid."""
    sim = system_file(tmp_path, {"base": "h200x2", "other_processes": {"1": [999]}})
    code, doc, err = json_run(capsys, tmp_path, "--simulate", sim, "-t", "0", *FAST,
                              "--wait-idle", "1")  # fmt: skip
    assert code == 0, err
    (warning,) = [w for w in doc["warnings"] if "--wait-idle" in w]
    assert warning.startswith("WARNING: GPU 1") and "pid 999" in warning


def test_wait_idle_run_waits_for_a_process_that_leaves(capsys, tmp_path):
    """A process gone after 1 modelled second: the run notes the wait, and warns of nothing."""
    leaves = {"1": {"pids": [999], "until_s": 1}}
    sim = system_file(tmp_path, {"base": "h200x2", "other_processes": leaves})
    code, doc, err = json_run(capsys, tmp_path, "--simulate", sim, "-t", "0", *FAST,
                              "--wait-idle", "30")  # fmt: skip
    assert code == 0, err
    assert any(w.startswith("NOTE: waited") for w in doc["warnings"])
    assert not any(w.startswith("WARNING: GPU") for w in doc["warnings"])
