"""The kernel-module registry: how gpubw and its plugins ship CUDA kernels."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import gpubw
from gpubw.errors import PluginError
from gpubw.kernels import KERNELS, KernelSpec
from gpubw.kernels import modules as km

TWICE_SRC = r"""
extern "C" __global__ void kmtest_twice(float *buf, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        buf[i] *= 2.0f;
}
"""
TWICE = KernelSpec("kmtest_twice", ("ptr", "u64"), "(buf, n): buf[i] *= 2 for i < n floats")


def sim_twice(launch: Any, buf: int, n: int) -> None:
    launch.traffic(buf, read=4 * n, written=4 * n)


def make(name: str = "kmtest", **kw: Any) -> km.KernelModule:
    args: dict[str, Any] = {
        "name": name,
        "source": TWICE_SRC,
        "kernels": (TWICE,),
        "simulate": {"kmtest_twice": sim_twice},
    }
    args.update(kw)
    return km.KernelModule(**args)


@pytest.fixture
def clean() -> Iterator[None]:
    before = {m.name for m in km.kernel_modules()}
    yield
    for m in km.kernel_modules():
        if m.name not in before:
            km.unregister_kernel_module(m.name)


def test_public_names() -> None:
    for name in ("KernelModule", "KernelSpec", "register_kernel_module", "SimulatedLaunch"):
        assert name in gpubw.__all__
        assert hasattr(gpubw, name)
    assert gpubw.KernelSpec is KernelSpec
    assert gpubw.KernelModule is km.KernelModule
    assert gpubw.register_kernel_module is km.register_kernel_module


def test_builtin_module_is_first_and_is_gpubws_own() -> None:
    first = km.kernel_modules()[0]
    assert first.name == km.BUILTIN == "gpubw"
    assert first.names == tuple(KERNELS)
    assert first.source == gpubw.kernels.source("gpubw.cu")
    assert not first.simulate  # the simulated backend models gpubw's own kernels itself
    module, spec = km.find_kernel("gpubw_copy")
    assert module is first
    assert spec is KERNELS["gpubw_copy"]


def test_register_find_and_unregister(clean: None) -> None:
    gen = km.generation()
    module = make()
    assert gpubw.register_kernel_module(module) is module
    assert km.generation() > gen
    assert km.kernel_modules()[-1] is module
    found, spec = km.find_kernel("kmtest_twice")
    assert found is module and spec is TWICE
    assert module.simulate["kmtest_twice"] is sim_twice
    km.unregister_kernel_module("kmtest")
    with pytest.raises(KeyError):
        km.find_kernel("kmtest_twice")
    assert "kmtest" not in {m.name for m in km.kernel_modules()}


def test_registering_the_same_code_twice_is_a_no_op(clean: None) -> None:
    km.register_kernel_module(make())
    gen = km.generation()
    again = make()  # a module body that ran twice builds an equal module
    km.register_kernel_module(again)
    assert [m.name for m in km.kernel_modules()].count("kmtest") == 1
    assert km.find_kernel("kmtest_twice")[0] is again
    assert km.generation() >= gen


def test_a_different_module_under_a_taken_name_is_refused(clean: None) -> None:
    km.register_kernel_module(make())
    with pytest.raises(PluginError, match="different kernel module named 'kmtest'"):
        km.register_kernel_module(make(source=TWICE_SRC + "\n// changed\n"))


def test_kernel_names_are_global(clean: None) -> None:
    km.register_kernel_module(make())
    with pytest.raises(PluginError, match="already defines"):
        km.register_kernel_module(make(name="other"))
    clash = KernelSpec("gpubw_copy", ("ptr",), "clash")
    with pytest.raises(PluginError, match="module 'gpubw' already defines"):
        km.register_kernel_module(make(name="thief", kernels=(clash,), simulate={}))


def test_the_builtin_name_is_reserved() -> None:
    with pytest.raises(PluginError, match="gpubw's own"):
        km.register_kernel_module(make(name="gpubw"))
    with pytest.raises(PluginError):
        km.unregister_kernel_module("gpubw")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": ""}, "must be non-empty"),
        ({"name": "a b"}, "must be non-empty"),
        ({"kernels": ()}, "declares no kernels"),
        ({"kernels": (TWICE, TWICE)}, "twice"),
        ({"kernels": (KernelSpec("kmtest_f", ("float",), ""),), "simulate": {}}, "parameter"),
        ({"simulate": {"kmtest_nope": sim_twice}}, "does not declare"),
        ({"kernels": ("kmtest_twice",)}, "not a KernelSpec"),
    ],
)
def test_invalid_modules_are_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        make(**kw)


def test_register_needs_a_kernel_module() -> None:
    with pytest.raises(PluginError):
        km.register_kernel_module("not a module")  # type: ignore[arg-type]


def test_simulate_mapping_is_read_only() -> None:
    module = make()
    with pytest.raises(TypeError):
        module.simulate["x"] = sim_twice  # type: ignore[index]


def test_module_spec_lookup() -> None:
    module = make()
    assert module.spec("kmtest_twice") is TWICE
    with pytest.raises(KeyError):
        module.spec("nope")


def test_nvrtc_compiles_a_plugin_module_for_sm90() -> None:
    cache = pytest.importorskip("gpubw.kernels.cache")
    try:
        cache.nvrtc_version()
    except gpubw.GpubwError as exc:
        pytest.skip(f"NVRTC is not available: {exc}")
    image = cache.compile_source(TWICE_SRC, cache.Target("cubin", "sm_90"), "kmtest.cu")
    assert image[:4] == b"\x7fELF"
