"""The plugin is found through its entry points, selected by ``-p stream``, and declares its
kernel module, which the System loads; its kernels compile with NVRTC for sm_90."""

from __future__ import annotations

import importlib.metadata

import gpubw
import pytest

from gpubw_stream.testcases import TESTCASES

KEYS = (
    "stream_copy",
    "stream_scale",
    "stream_add",
    "stream_triad",
    "stream_read",
    "stream_write",
    "stream_strided_read",
)


def test_entry_points_name_every_testcase() -> None:
    """gpubw-stream's entry points name exactly its seven testcases, each a described Testcase."""
    eps = {
        ep.name: ep
        for ep in importlib.metadata.entry_points(group="gpubw.testcases")
        if ep.name.startswith("stream_")
    }
    assert set(eps) == set(KEYS)
    for key, ep in eps.items():
        assert ep.dist is not None and ep.dist.name == "gpubw-stream"
        cls = ep.load()
        assert issubclass(cls, gpubw.Testcase)
        assert cls in TESTCASES
        assert cls.description(), f"{key} has no description"


def test_registry_lists_them_after_the_builtins_and_prefix_selects_them() -> None:
    """The registry lists the STREAM testcases after the built-ins, and -p stream selects them."""
    registry = pytest.importorskip("gpubw.runner.registry")
    reg = registry.Registry.discover()
    entries = {e.key: e for e in reg}
    for key in KEYS:
        entry = entries[key]
        assert entry.failure is None, entry.failure
        assert entry.plugin == "gpubw-stream"
        assert not entry.builtin
    selected = reg.select(prefixes=["stream"])
    assert sorted(e.key for e in selected) == sorted(KEYS)  # type: ignore[union-attr]
    builtin_last = max(e.index for e in reg if e.builtin)
    assert min(entries[k].index for k in KEYS) > builtin_last


def test_the_testcases_declare_the_kernel_module_the_system_loads() -> None:
    """Every STREAM testcase declares gpubw's and its own kernel module and sets no key; once
    a System has loaded what one declares, every kernel is findable and simulated."""
    from gpubw.backend.sim import presets
    from gpubw.kernels.modules import GPUBW, find_kernel, kernel_modules, unregister_kernel_module

    from gpubw_stream import kernels

    for cls in TESTCASES:
        assert cls.kernel_modules == (GPUBW, kernels.MODULE)
        assert not any("key" in vars(k) for k in cls.__mro__), cls
    unregister_kernel_module(kernels.MODULE.name)  # importing registered nothing; a run did
    assert kernels.MODULE not in kernel_modules()
    with pytest.raises(KeyError):
        find_kernel(kernels.SPECS[0].name)
    backend = presets.from_preset("h200x1")
    with gpubw.System(backend, gpubw.RunOptions()) as system:
        system.load_kernel_modules(TESTCASES[0].kernel_modules)
    assert kernels.MODULE in kernel_modules()
    for spec in kernels.SPECS:
        module, found = find_kernel(spec.name)
        assert module is kernels.MODULE and found == spec
        assert spec.name in kernels.MODULE.simulate, f"{spec.name} has no simulation"


def test_the_plugin_uses_only_gpubws_public_api() -> None:
    """The plugin imports only names in gpubw.__all__, never a gpubw submodule."""
    import ast
    import pathlib

    import gpubw_stream

    root = pathlib.Path(gpubw_stream.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module == "gpubw" or not node.module.startswith("gpubw."), (
                    f"{path.name} imports {node.module}"
                )
                if node.module == "gpubw":
                    for alias in node.names:
                        assert alias.name in gpubw.__all__, f"{path.name}: {alias.name}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("gpubw."), f"{path.name}: {alias.name}"


def _nvrtc_or_skip() -> None:
    try:
        from cuda.bindings import nvrtc

        nvrtc.nvrtcVersion()
    except Exception as exc:
        pytest.skip(f"NVRTC is not available: {exc}")


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_75"])
def test_kernels_compile_with_nvrtc(arch: str) -> None:
    """The plugin's kernels compile with NVRTC for sm_90, sm_80 and sm_75, every kernel present."""
    _nvrtc_or_skip()
    from cuda.core import Program, ProgramOptions

    from gpubw_stream import kernels

    # the options gpubw's cache passes, so a green test means gpubw can load the module
    options = ProgramOptions(name="gpubw_stream.cu", arch=arch, std="c++17")
    program = Program(kernels.source(), "c++", options)
    try:
        image = bytes(program.compile("cubin").code)
    finally:
        program.close()
    assert image[:4] == b"\x7fELF"
    for spec in kernels.SPECS:
        assert spec.name.encode() in image, f"{spec.name} missing from the {arch} cubin"


def test_gpubws_compile_path_builds_and_caches_the_module(tmp_path: object) -> None:
    """gpubw's NVRTC cache compiles the plugin module for sm_90, then returns the same image."""
    # What the real backend does for a registered module; CPU only, for an H200 (cc 9.0).
    _nvrtc_or_skip()
    cache = pytest.importorskip("gpubw.kernels.cache")
    nvrtc = pytest.importorskip("gpubw.backend.nvrtc")
    from gpubw_stream import kernels

    store = cache.KernelCache(tmp_path)
    image, target = nvrtc.load_or_compile(
        (9, 0), None, cache=store, source_text=kernels.MODULE.source, name="gpubw_stream.cu"
    )
    assert target.arch == "sm_90" and image[:4] == b"\x7fELF"
    again, _ = nvrtc.load_or_compile(
        (9, 0), None, cache=store, source_text=kernels.MODULE.source, name="gpubw_stream.cu"
    )
    assert again == image
