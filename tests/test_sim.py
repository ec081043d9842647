"""The simulated backend's facade: identity, the kernel table, and its place in the imports
(gpubw.backend.sim)."""

from __future__ import annotations

from gpubw.backend.sim.backend import SimulatedBackend
from gpubw.backend.sim.presets import load_system


def test_backend_identity() -> None:
    """The backend says it is simulated, in its name, flag and versions."""
    be = SimulatedBackend(load_system("h200x8"))
    assert be.name == "simulated" and be.simulated
    v = be.versions()
    assert v["simulated"] and v["system"] == "h200x8" and "simulated" in v["driver"]
    assert isinstance(v["cuda_driver"], int)


def test_every_builtin_kernel_is_emulated() -> None:
    """The emulation table has exactly the built-in kernels, each a function of its own."""
    from gpubw.backend.sim.kernels import EMULATIONS
    from gpubw.kernels import KERNELS

    assert set(EMULATIONS) == set(KERNELS)
    assert len({id(f) for f in EMULATIONS.values()}) == len(EMULATIONS)


def test_sim_imports_nothing_above_it() -> None:
    """No module of the simulator (gpubw.backend.sim but its presets and system file
    modules) imports presets, the system file modules, system, runner or cli, not even
    inside a function: presets and system files build on the simulator, never the other
    way round."""
    import ast
    import importlib
    import pkgutil
    from pathlib import Path

    import gpubw.backend.sim as sim

    readers = ("presets", "system_file", "system_checks")
    forbidden = (
        *(f"gpubw.backend.sim.{m}" for m in readers),
        "gpubw.memory.system",
        "gpubw.runner.core",
        "gpubw.cli.command",
    )
    found = []
    modules = [m.name for m in pkgutil.iter_modules(sim.__path__)]
    assert {"model", "memory", "engine", "kernels", "faults", "backend", *readers} <= set(modules)
    simulator = [m for m in modules if m not in readers]
    here = Path(sim.__file__).parent
    for path in [Path(sim.__file__), *(here / f"{m}.py" for m in simulator)]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(path.name, n) for n in names if n.startswith(forbidden)]
    assert found == []
    for m in modules:
        importlib.import_module(f"gpubw.backend.sim.{m}")
