"""Shared fixtures: gpubw Systems on simulated presets, closed and checked for leaks."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest
from hypothesis import settings

from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.faults import Faults
from gpubw.backend.sim.model import SimSystem
from gpubw.backend.sim.presets import load_system
from gpubw.memory.system import System
from gpubw.model.options import RunOptions

MIB = 1 << 20

# No example of a property test has a deadline: Hypothesis's default (200 ms per example)
# failed test_sampling's on a loaded 2-core machine (one example took 294 ms, the same one
# 1.9 ms when replayed). A property holds or not whatever the machine's speed.
settings.register_profile("gpubw", deadline=None)
settings.load_profile("gpubw")

SimSystemFactory = Callable[..., System]


def pytest_configure(config: pytest.Config) -> None:
    """The tests send SIGINT and SIGTERM to gpubw (in this process and in the processes they
    start), so neither may be ignored: a shell ignores SIGINT in a job it starts in the
    background (``pytest &``, a CI step, ``.ci/stress``'s load), every process started
    from it inherits that, and gpubw rightly leaves an ignored signal ignored. Python's own
    handlers are put back (started processes get the default ones)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def sim_system() -> Iterator[SimSystemFactory]:
    """Factory: ``sim_system("h200x2", faults=..., samples=3, ...)`` gives a System on a
    simulated preset (or a SimSystem); every System is closed at teardown and must leave no
    allocation behind."""
    made: list[System] = []

    def make(
        preset: str | SimSystem = "h200x2",
        *,
        faults: Faults | None = None,
        options: RunOptions | None = None,
        **option_kw: object,
    ) -> System:
        model = load_system(preset) if isinstance(preset, str) else preset
        backend = SimulatedBackend(model, faults)
        opts = options or RunOptions(**option_kw)  # type: ignore[arg-type]
        system = System(backend, opts)
        made.append(system)
        return system

    yield make
    for system in made:
        system.close()
        backend = system.backend
        assert isinstance(backend, SimulatedBackend)
        assert backend.live_allocations() == [], "the System leaked simulated memory"


@pytest.fixture
def backend() -> SimulatedBackend:
    """A bare simulated backend on the h200x2 preset (kernels loaded on both devices)."""
    be = SimulatedBackend(load_system("h200x2"))
    for d in range(2):
        be.load_kernels(d)
    return be


@pytest.fixture(autouse=True)
def _no_list_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpubw -l`` lists without its cache file in every test (never the user's cache);
    tests/test_listing.py turns it on in a temporary directory."""
    monkeypatch.setenv("GPUBW_NO_LIST_CACHE", "1")


@pytest.fixture(autouse=True)
def _private_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kernels and verification patterns are cached in a directory of this test session,
    never in the user's cache (a test that wants its own sets GPUBW_CACHE_DIR itself)."""
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "gpubw-cache"))
