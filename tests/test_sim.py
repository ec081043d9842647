"""The simulated backend's facade: identity, the kernel table, and its place in the imports
(gpubw.backend.sim)."""

from __future__ import annotations

from gpubw.backend.presets import load_system
from gpubw.backend.sim import SimulatedBackend


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
    """No module of gpubw.backend.sim imports presets, system, runner or cli, not even
    inside a function: presets builds on the simulator, never the other way round."""
    import ast
    import importlib
    import pkgutil
    from pathlib import Path

    import gpubw.backend.sim as sim

    forbidden = (
        "gpubw.backend.presets",
        "gpubw.memory.system",
        "gpubw.runner.core",
        "gpubw.cli.command",
    )
    found = []
    modules = [m.name for m in pkgutil.iter_modules(sim.__path__)]
    assert {"model", "memory", "engine", "kernels", "faults"} <= set(modules)
    for path in [Path(sim.__file__), *(Path(sim.__file__).parent / f"{m}.py" for m in modules)]:
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
