"""The kernel-module registry: how gpubw and its plugins ship CUDA kernels."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import gpubw
from gpubw.kernels import KERNELS, KernelSpec
from gpubw.kernels import modules as km
from gpubw.model.errors import PluginError

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
def fresh_registry() -> Iterator[None]:
    """The registry as a fresh process has it (the protocol module only), restored after."""
    saved = (dict(km._modules), dict(km._by_kernel))
    with km._lock:
        km._modules.clear()
        km._by_kernel.clear()
        km._add(km.PROTOCOL)
    yield
    with km._lock:
        km._modules.clear()
        km._modules.update(saved[0])
        km._by_kernel.clear()
        km._by_kernel.update(saved[1])
        km._add(km.PROTOCOL)  # a new generation: every System loads again


@pytest.fixture
def clean() -> Iterator[None]:
    before = {m.name for m in km.kernel_modules()}
    yield
    for m in km.kernel_modules():
        if m.name not in before and m.name != km.BUILTIN:  # gpubw.cu stays once declared
            km.unregister_kernel_module(m.name)


def test_public_names() -> None:
    """gpubw exports the kernel-module API, the very objects of gpubw.kernels."""
    for name in ("KernelModule", "KernelSpec", "register_kernel_module", "SimulatedLaunch"):
        assert name in gpubw.__all__
        assert hasattr(gpubw, name)
    assert gpubw.KernelSpec is KernelSpec
    assert gpubw.KernelModule is km.KernelModule
    assert gpubw.register_kernel_module is km.register_kernel_module


def test_builtin_modules_split_the_catalogue() -> None:
    """gpubw's own modules: the protocol unit (registered first, on import) and gpubw.cu,
    together the KERNELS catalogue, each its own source, neither with simulations."""
    assert km.kernel_modules()[0] is km.PROTOCOL
    assert km.PROTOCOL.name == km.PROTOCOL_NAME == "gpubw_protocol"
    assert km.GPUBW.name == km.BUILTIN == "gpubw"
    both = km.PROTOCOL.names + km.GPUBW.names
    assert sorted(both) == sorted(KERNELS) and len(set(both)) == len(both)
    assert km.GPUBW.names == tuple(n for n in KERNELS if n not in km.PROTOCOL.names)
    assert km.PROTOCOL.source == gpubw.kernels.source("gpubw_protocol.cu")
    assert km.GPUBW.source == gpubw.kernels.source("gpubw.cu")
    for module in (km.PROTOCOL, km.GPUBW):
        assert not module.simulate  # the simulated backend models gpubw's own kernels itself
    module, spec = km.find_kernel("gpubw_gate_wait")
    assert module is km.PROTOCOL and spec is KERNELS["gpubw_gate_wait"]
    assert km.builtin_module("gpubw_copy") is km.GPUBW
    assert km.builtin_module("gpubw_fill") is km.PROTOCOL
    assert km.builtin_module("kmtest_twice") is None


def test_copy_kernels_registered_once_declared(fresh_registry: None) -> None:
    """Only the protocol module is registered on import; gpubw.cu once a System is told a
    testcase launches its kernels, and a System no testcase declared to loads it too."""
    assert km.kernel_modules() == (km.PROTOCOL,)
    with pytest.raises(KeyError):
        km.find_kernel("gpubw_copy")
    with gpubw.System(_simulated()) as system:
        system.load_kernel_modules(())  # a copy-engine testcase
        assert km.kernel_modules() == (km.PROTOCOL,)
        system.load_kernels()  # what a measurement calls: still nothing more
        assert km.kernel_modules() == (km.PROTOCOL,)
        system.load_kernel_modules((km.GPUBW,))
        assert km.kernel_modules() == (km.PROTOCOL, km.GPUBW)
    km._modules.pop(km.BUILTIN)
    km._by_kernel.clear()
    km._by_kernel.update(dict.fromkeys(km.PROTOCOL.names, km.PROTOCOL))
    with gpubw.System(_simulated()) as system:
        system.load_kernels()  # measuring without the runner: everything of gpubw's
        assert km.kernel_modules() == (km.PROTOCOL, km.GPUBW)


def test_register_find_and_unregister(clean: None) -> None:
    """A registered module's kernels are found (generation bumped); unregistered, they are gone."""
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
    """Registering an equal module again keeps a single entry under its name and raises nothing."""
    km.register_kernel_module(make())
    gen = km.generation()
    again = make()  # a module body that ran twice builds an equal module
    km.register_kernel_module(again)
    assert [m.name for m in km.kernel_modules()].count("kmtest") == 1
    assert km.find_kernel("kmtest_twice")[0] is again
    assert km.generation() >= gen


def test_a_different_module_under_a_taken_name_is_refused(clean: None) -> None:
    """A module with different code under a taken name is refused with a PluginError."""
    km.register_kernel_module(make())
    with pytest.raises(PluginError, match="different kernel module named 'kmtest'"):
        km.register_kernel_module(make(source=TWICE_SRC + "\n// changed\n"))


def test_kernel_names_are_global(clean: None) -> None:
    """A kernel name another module (gpubw's included) already defines is refused."""
    km.register_kernel_module(make())
    with pytest.raises(PluginError, match="already defines"):
        km.register_kernel_module(make(name="other"))
    clash = KernelSpec("gpubw_copy", ("ptr",), "clash")
    with pytest.raises(PluginError, match="module 'gpubw' already defines"):
        km.register_kernel_module(make(name="thief", kernels=(clash,), simulate={}))


@pytest.mark.parametrize("name", ["gpubw", "gpubw_protocol"])
def test_the_builtin_name_is_reserved(name: str) -> None:
    """gpubw's own module names can be neither registered nor unregistered."""
    with pytest.raises(PluginError, match="gpubw's own"):
        km.register_kernel_module(make(name=name))
    with pytest.raises(PluginError):
        km.unregister_kernel_module(name)


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
    """Malformed modules (bad name, kernels, parameter types or simulations) raise a PluginError."""
    with pytest.raises(PluginError, match=message):
        make(**kw)


def test_register_needs_a_kernel_module() -> None:
    """register_kernel_module refuses anything that is not a KernelModule (a TypeError: API
    misuse, not bad user input)."""
    with pytest.raises(TypeError, match="needs a KernelModule"):
        km.register_kernel_module("not a module")  # type: ignore[arg-type]


def test_simulate_mapping_is_read_only() -> None:
    """A module's simulate mapping cannot be changed after construction."""
    module = make()
    with pytest.raises(TypeError):
        module.simulate["x"] = sim_twice  # type: ignore[index]


def test_module_spec_lookup() -> None:
    """KernelModule.spec returns a declared kernel's spec and raises KeyError for any other."""
    module = make()
    assert module.spec("kmtest_twice") is TWICE
    with pytest.raises(KeyError):
        module.spec("nope")


def test_nvrtc_compiles_a_plugin_module_for_sm90() -> None:
    """NVRTC compiles a plugin module's source to an sm_90 cubin (skipped without NVRTC)."""
    nvrtc = pytest.importorskip("gpubw.backend.nvrtc")
    try:
        nvrtc.nvrtc_version()
    except gpubw.GpubwError as exc:
        pytest.skip(f"NVRTC is not available: {exc}")
    image = nvrtc.compile_source(TWICE_SRC, nvrtc.Target("cubin", "sm_90"), "kmtest.cu")
    assert image[:4] == b"\x7fELF"


# -- the backends and System with plugin modules ----------------------------------------------


def sim_twice_data(launch: Any, buf: int, n: int) -> None:
    """A simulation that also computes: buf[i] *= 2 on the held bytes."""
    import numpy as np

    launch.traffic(buf, read=4 * n, written=4 * n)
    data = launch.read(buf, 4 * n)
    if data is not None:
        launch.write(buf, (np.frombuffer(data, dtype="<f4") * 2).astype("<f4").tobytes())


def _simulated(preset: str = "h200x1") -> Any:
    presets = pytest.importorskip("gpubw.backend.sim.presets")
    return presets.from_preset(preset)


def test_simulated_backend_runs_a_plugin_kernel_through_its_simulation(clean: None) -> None:
    """The simulated backend runs a plugin kernel via its simulation: data doubled, time taken."""
    import struct

    from gpubw.backend.base import ptr, u64

    km.register_kernel_module(make(simulate={"kmtest_twice": sim_twice_data}))
    backend = _simulated()
    with gpubw.System(backend) as system:
        system.load_kernels()
        n = 1024
        host = gpubw.HostBuffer.allocate(system, None, 4 * n)
        dev = gpubw.DeviceBuffer.allocate(system, 0, 4 * n)
        host.write(struct.pack(f"<{n}f", *range(n)))
        stream = backend.create_stream(0)
        start, end = backend.create_event(0), backend.create_event(0)
        backend.memcpy_async(dev.ptr, host.ptr, 4 * n, stream)
        backend.record_event(start, stream)
        backend.launch("kmtest_twice", 4, 256, (ptr(dev.ptr), u64(n)), stream)
        backend.record_event(end, stream)
        backend.memcpy_async(host.ptr, dev.ptr, 4 * n, stream)
        backend.synchronize(stream, 10.0)
        assert struct.unpack(f"<{n}f", host.read(4 * n)) == tuple(2.0 * i for i in range(n))
        assert backend.elapsed_seconds(start, end) > 0  # the reported traffic takes time
        for e in (start, end):
            backend.destroy_event(e)
        backend.destroy_stream(stream)
        host.close()
        dev.close()


def test_simulated_time_follows_the_reported_traffic(clean: None) -> None:
    """A plugin kernel's simulated time scales with the traffic its simulation reports."""
    from gpubw.backend.base import ptr, u64

    km.register_kernel_module(make())
    times = []
    for n in (1 << 26, 1 << 28):  # symbolic buffers: timing only
        backend = _simulated()
        with gpubw.System(backend) as system:
            system.load_kernels()
            dev = gpubw.DeviceBuffer.allocate(system, 0, 4 * n)
            stream = backend.create_stream(0)
            start, end = backend.create_event(0), backend.create_event(0)
            backend.record_event(start, stream)
            backend.launch("kmtest_twice", 4, 256, (ptr(dev.ptr), u64(n)), stream)
            backend.record_event(end, stream)
            backend.synchronize(stream, 10.0)
            times.append(backend.elapsed_seconds(start, end))
            for e in (start, end):
                backend.destroy_event(e)
            backend.destroy_stream(stream)
            dev.close()
    assert times[1] == pytest.approx(4 * times[0], rel=0.05)


def test_a_plugin_kernel_without_a_simulation_cannot_run_simulated(clean: None) -> None:
    """Launching a plugin kernel that has no simulation on the simulated backend raises an error."""
    from gpubw.backend.base import ptr, u64

    km.register_kernel_module(make(simulate={}))
    backend = _simulated()
    with gpubw.System(backend) as system:
        system.load_kernels()
        dev = gpubw.DeviceBuffer.allocate(system, 0, 4096)
        stream = backend.create_stream(0)
        with pytest.raises(gpubw.GpubwError, match="no simulation"):
            backend.launch("kmtest_twice", 1, 256, (ptr(dev.ptr), u64(1024)), stream)
        backend.destroy_stream(stream)
        dev.close()


def test_system_loads_again_when_a_module_is_registered_later(clean: None) -> None:
    """System.load_kernels loads once per device, and again after a new module is registered."""
    backend = _simulated("h200x2")
    calls: list[int] = []
    original = backend.load_kernels

    def spy(device: int) -> None:
        calls.append(device)
        original(device)

    backend.load_kernels = spy  # type: ignore[method-assign]
    with gpubw.System(backend) as system:
        system.load_kernels()
        system.load_kernels()
        assert calls == [0, 1]  # once per device, not again
        km.register_kernel_module(make())
        system.load_kernels()
        assert calls == [0, 1, 0, 1]  # a new module: every device loads what it lacks


def test_buffer_enqueue_check_reports_a_plugin_checks_first_bad_word(clean: None) -> None:
    """enqueue_check with a plugin's check kernel passes good data, reports the first bad word."""
    from gpubw.backend.base import u64

    def sim_find(launch: Any, buf: int, n: int, bad: int, first_bad: int) -> None:
        if bad < n:  # pretend word `bad` is wrong
            launch.write(first_bad, (bad).to_bytes(8, "little"))

    spec = KernelSpec("kmtest_find", ("ptr", "u64", "u64", "ptr"), "(buf, n, bad, first_bad)")
    src = (
        'extern "C" __global__ void kmtest_find(unsigned *b, unsigned long long n, '
        "unsigned long long bad, unsigned long long *first_bad) { if (bad < n) *first_bad = bad; }"
    )
    km.register_kernel_module(
        km.KernelModule("kmtest", src, (spec,), simulate={"kmtest_find": sim_find})
    )
    backend = _simulated()
    with gpubw.System(backend) as system:
        system.load_kernels()
        buf = gpubw.DeviceBuffer.allocate(system, 0, 4096)
        stream = backend.create_stream(0)
        args = (gpubw.ptr(buf.ptr), u64(1024))
        buf.enqueue_check("kmtest_find", 1, 1, (*args, u64(5000)), stream=stream, exec_device=0)
        backend.synchronize(stream, 10.0)
        buf.check_verified(0)  # nothing bad
        buf.enqueue_check(
            "kmtest_find", 1, 1, (*args, u64(7)), stream=stream, exec_device=0, slot=3
        )
        backend.synchronize(stream, 10.0)
        with pytest.raises(gpubw.VerificationError) as info:
            buf.check_verified(3)
        assert info.value.offset == 28
        backend.destroy_stream(stream)
        buf.close()


def test_testcases_declare_gpubws_module_by_default() -> None:
    """A Testcase declares gpubw's own kernel module unless it says otherwise."""
    assert gpubw.Testcase.kernel_modules == (km.GPUBW,)

    class Mine(gpubw.Testcase):
        kernel_modules = (*gpubw.Testcase.kernel_modules, make())

    assert Mine.kernel_modules[0] is km.GPUBW and Mine.kernel_modules[1].name == "kmtest"


def test_system_loads_declared_modules_once_per_device(clean: None) -> None:
    """System.load_kernel_modules registers the modules and loads each device once; again only
    for a module it has not loaded; a clash is a PluginError."""
    backend = _simulated("h200x2")
    calls: list[int] = []
    original = backend.load_kernels

    def spy(device: int) -> None:
        calls.append(device)
        original(device)

    backend.load_kernels = spy  # type: ignore[method-assign]
    module = make()
    with gpubw.System(backend) as system:
        system.load_kernel_modules((km.GPUBW, module))
        assert km.find_kernel("kmtest_twice")[0] is module
        assert calls == [0, 1]
        system.load_kernel_modules((km.GPUBW, module))
        system.load_kernels()
        assert calls == [0, 1]
        with pytest.raises(PluginError, match="already defines"):
            system.load_kernel_modules((make(name="other"),))
        assert calls == [0, 1]


class _Twice(gpubw.Testcase):
    """Doubles a device buffer with the kmtest kernel and reports its size."""

    kernel_modules = (*gpubw.Testcase.kernel_modules, make())

    def run(self, size: int, loops: int) -> list[gpubw.Matrix]:
        from gpubw.backend.base import ptr, u64

        backend = self.system.backend
        buf = gpubw.DeviceBuffer.allocate(self.system, 0, size)
        stream = backend.create_stream(0)
        try:
            backend.launch("kmtest_twice", 1, 256, (ptr(buf.ptr), u64(size // 4)), stream)
            backend.synchronize(stream, 10.0)
        finally:
            backend.destroy_stream(stream)
            buf.close()
        return [
            gpubw.Matrix(
                key=self.key,
                description="kmtest (GB/s)",
                unit=gpubw.BANDWIDTH,
                row_labels=["0"],
                column_labels=["0"],
                values=[[float(size)]],
            )
        ]


def test_the_runner_loads_what_a_testcase_declares(clean: None) -> None:
    """A testcase's declared module is loaded by the runner before run(): nothing registers it
    on import, yet its kernel launches."""
    from _run import run
    from gpubw.runner.registry import Entry

    assert "kmtest" not in {m.name for m in km.kernel_modules()}
    report = run(
        lambda options: gpubw.System(_simulated(), options),
        [Entry(0, "kmtest_case", "tests", cls=_Twice)],
    )
    (result,) = report.testcases
    assert result.status.value == "Passed", result.message
    assert result.matrices[0].key == "kmtest_case"
    assert km.find_kernel("kmtest_twice")[0] is _Twice.kernel_modules[1]


def test_copy_engine_testcases_run_before_gpubw_cu_is_loaded(fresh_registry: None) -> None:
    """Run by the runner, the copy-engine testcases launch only the protocol kernels and never
    make the System load gpubw.cu (on a cold kernel cache still compiling); the first testcase
    that launches a copy kernel loads it, before its run()."""
    from _run import run
    from gpubw.runner.registry import Entry
    from gpubw.testcases import fan, host, host_all, peer

    copy_engine = [
        cls
        for module in (host, host_all, peer, fan)
        for name, cls in sorted(vars(module).items())
        if name.endswith("CE") and isinstance(cls, type)
    ]
    assert len(copy_engine) == 16
    launched: list[tuple[str, tuple[km.KernelModule, ...]]] = []

    def opener(options: Any) -> gpubw.System:
        backend = _simulated("h200x2")
        original = backend.launch

        def spy(kernel: str, *args: Any) -> None:
            launched.append((kernel, km.kernel_modules()))
            original(kernel, *args)

        backend.launch = spy  # type: ignore[method-assign]
        return gpubw.System(backend, options)

    entries = [Entry(i, f"tc{i}", "tests", cls=cls) for i, cls in enumerate(copy_engine)]
    report = run(opener, entries)
    assert [r.status.value for r in report.testcases] == ["Passed"] * 16
    assert km.kernel_modules() == (km.PROTOCOL,)  # gpubw.cu was never needed
    assert launched and {k for k, _ in launched} <= set(km.PROTOCOL.names)
    launched.clear()
    sm = gpubw.testcases.host.HostToDeviceSM
    report = run(opener, [Entry(0, "sm", "tests", cls=sm)])
    assert report.testcases[0].status.value == "Passed"
    assert ("gpubw_copy", (km.PROTOCOL, km.GPUBW)) in launched  # loaded before run()
