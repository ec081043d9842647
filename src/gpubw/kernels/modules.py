"""Kernel modules: how gpubw and its plugins ship CUDA kernels.

A :class:`KernelModule` is one CUDA C source (compiled by NVRTC for each device's exact
architecture and cached on disk by the real backend), the catalogue of the ``extern "C"``
kernels it defines (:class:`~gpubw.kernels.KernelSpec`: name, parameter C types, doc), and,
for the simulated backend, one Python function per kernel that models it.

gpubw's own kernels (:data:`gpubw.kernels.KERNELS`; the simulated backend models those itself)
are two modules, two compile units: :data:`PROTOCOL` (``kernels/gpubw_protocol.cu``: the spin
gate, fill and verify, which every measurement launches; always registered and loaded) and
:data:`GPUBW` (``kernels/gpubw.cu``: the copy, one-way, chase and TMA kernels). A testcase
declares the modules it launches kernels of in its ``kernel_modules`` class attribute;
:data:`GPUBW` is the default (:attr:`gpubw.Testcase.kernel_modules`), a testcase whose copies
are the copy engine's declares none, and a plugin adds its module to them. Before a testcase
runs, the runner has the System load what it declares
(:meth:`gpubw.memory.system.System.load_kernel_modules`), which registers each module here and
loads it on every device: so on a cold kernel cache the copy-engine testcases run while
``gpubw.cu`` still compiles in the background. Nothing is registered by importing a module::

    from gpubw import KernelModule, KernelSpec, Testcase

    MODULE = KernelModule(
        name="myplugin",
        source=SOURCE,  # CUDA C text with extern "C" __global__ kernels
        kernels=(KernelSpec("myplugin_twice", ("ptr", "u64"), "(buf, n): buf[i] *= 2"),),
        simulate={"myplugin_twice": simulate_twice},
    )

    class Twice(Testcase):
        kernel_modules = (*Testcase.kernel_modules, MODULE)

Then ``system.backend.launch("myplugin_twice", grid, block, (ptr(p), u64(n)), stream)``
works on both backends. Kernel names are global: they must be unique over all modules (prefix
them with the plugin's name).

**Simulating a plugin kernel.** The simulated backend calls ``simulate[name](launch, *args)``
where ``args`` are the integer values of the launch's :class:`~gpubw.backend.base.KernelArg`\\ s
in the order of the spec, and ``launch`` is a :class:`SimulatedLaunch`. The function must
report the memory traffic of the whole launch (all its loops) with ``launch.traffic(pointer,
read=..., written=...)``: the backend turns those bytes into the launch's duration with its
model of where ``pointer`` lives (device memory, a peer, the host). Where the simulated
system holds real bytes (small buffers), ``launch.read``/``launch.write`` give them, so the
function can compute results that verification then checks; ``launch.read`` returns None where
the memory is not held (large buffers), and the function then skips the data part
(``launch.holds`` says so without reading).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

import attrs

from gpubw.kernels import KERNELS, PROTOCOL_KERNELS, KernelSpec
from gpubw.kernels import source as _read_source
from gpubw.model.errors import PluginError

#: Name of gpubw's own module of copy kernels (:data:`GPUBW`).
BUILTIN = "gpubw"
#: Name of gpubw's own module of protocol kernels (:data:`PROTOCOL`).
PROTOCOL_NAME = "gpubw_protocol"
#: C types a kernel parameter may have (those of :class:`~gpubw.backend.base.KernelArg`).
PARAM_TYPES = frozenset({"ptr", "u64", "u32", "i32"})


@runtime_checkable
class SimulatedLaunch(Protocol):
    """What a simulate function receives: one launch of a plugin kernel on the simulated
    backend."""

    #: ordinal of the device the launch runs on
    device: int
    grid: int
    block: int

    def read(self, pointer: int, nbytes: int) -> bytes | None:
        """The simulated memory at ``pointer`` (device or host), or None where the simulated
        system does not hold real bytes for it."""
        ...

    def holds(self, pointer: int, nbytes: int) -> bool:
        """Whether the simulated system holds real bytes for ``nbytes`` at ``pointer`` (so
        that a function can skip building data that :meth:`write` would drop)."""
        ...

    def write(self, pointer: int, data: bytes) -> None:
        """Store ``data`` at ``pointer`` (ignored where the memory is not held)."""
        ...

    def traffic(self, pointer: int, *, read: int = 0, written: int = 0) -> None:
        """Report that the launch reads ``read`` and writes ``written`` bytes of the memory
        that holds ``pointer``; the launch's simulated duration is computed from these."""
        ...


#: ``simulate(launch, *args)``; ``args`` are the launch arguments' integer values.
SimulateFn = Callable[..., None]


def _spec_tuple(value: Iterable[KernelSpec]) -> tuple[KernelSpec, ...]:
    return tuple(value)


def _simulate_mapping(value: Mapping[str, SimulateFn]) -> Mapping[str, SimulateFn]:
    return types.MappingProxyType(dict(value))


@attrs.frozen(eq=False)
class KernelModule:
    """One CUDA C source, the kernels it defines, and their simulations."""

    #: unique module name (a plugin uses its own name); also names the compiled cubin
    name: str
    #: CUDA C source; every kernel of ``kernels`` is an ``extern "C" __global__`` function
    source: str = attrs.field(repr=False)
    kernels: tuple[KernelSpec, ...] = attrs.field(converter=_spec_tuple)
    #: kernel name -> Python model of it, for the simulated backend (see the module doc). A
    #: kernel without one cannot run on the simulated backend (built-in module excepted).
    simulate: Mapping[str, SimulateFn] = attrs.field(
        factory=dict, converter=_simulate_mapping, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise PluginError(
                f"kernel module name {self.name!r} must be non-empty letters, digits, - and _"
            )
        if not self.kernels:
            raise PluginError(f"kernel module {self.name!r} declares no kernels")
        seen: set[str] = set()
        for spec in self.kernels:
            if not isinstance(spec, KernelSpec):
                raise PluginError(f"kernel module {self.name!r}: {spec!r} is not a KernelSpec")
            if spec.name in seen:
                raise PluginError(f"kernel module {self.name!r} declares {spec.name!r} twice")
            seen.add(spec.name)
            bad = [p for p in spec.params if p not in PARAM_TYPES]
            if bad:
                raise PluginError(
                    f"kernel {spec.name!r} of module {self.name!r}: parameter types {bad} are "
                    f"not among {sorted(PARAM_TYPES)}"
                )
        extra = sorted(set(self.simulate) - seen)
        if extra:
            raise PluginError(
                f"kernel module {self.name!r} simulates kernels it does not declare: {extra}"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """The kernels' names, in declaration order."""
        return tuple(spec.name for spec in self.kernels)

    def spec(self, name: str) -> KernelSpec:
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)


#: gpubw's own protocol kernels (the spin gate, fill, verify: :data:`PROTOCOL_KERNELS`), the
#: small unit compiled first.
PROTOCOL = KernelModule(
    name=PROTOCOL_NAME,
    source=_read_source("gpubw_protocol.cu"),
    kernels=tuple(KERNELS[name] for name in PROTOCOL_KERNELS),
)
#: gpubw's own copy kernels (the SM copies, one-way kernels, the pointer chase, TMA): every
#: catalogued kernel that is not :data:`PROTOCOL`'s.
GPUBW = KernelModule(
    name=BUILTIN,
    source=_read_source("gpubw.cu"),
    kernels=tuple(spec for spec in KERNELS.values() if spec.name not in PROTOCOL_KERNELS),
)
#: gpubw's own modules, by name
_OWN = {PROTOCOL_NAME: PROTOCOL, BUILTIN: GPUBW}

_lock = threading.Lock()
_modules: dict[str, KernelModule] = {}
_by_kernel: dict[str, KernelModule] = {}
_generation = 0


def _add(module: KernelModule) -> None:
    # Under _lock.
    global _generation
    for name in module.names:
        # gpubw's own names are taken also before their module is registered
        owner = _by_kernel.get(name) or builtin_module(name)
        if owner is not None and owner.name != module.name:
            raise PluginError(
                f"kernel module {module.name!r} defines {name!r}, which module "
                f"{owner.name!r} already defines (kernel names are global; prefix them)"
            )
    old = _modules.get(module.name)
    if old is not None:
        for name in old.names:
            _by_kernel.pop(name, None)
    _modules[module.name] = module
    for name in module.names:
        _by_kernel[name] = module
    _generation += 1


def register_kernel_module(module: KernelModule) -> KernelModule:
    """Make ``module``'s kernels known to every backend (by name, :func:`find_kernel`);
    returns it. :meth:`gpubw.memory.system.System.load_kernel_modules` calls this for the modules a
    testcase declares; a plugin does not call it.

    Registering the same module again (same name, source and kernels) is a no-op that keeps
    the newest simulate functions. A different module under a registered name, a kernel name
    another module already defines, or a module named ``"gpubw"`` or ``"gpubw_protocol"``
    that is not :data:`GPUBW` or :data:`PROTOCOL` raises
    :class:`~gpubw.model.errors.PluginError`; something that is not a KernelModule raises
    TypeError.
    """
    if not isinstance(module, KernelModule):
        raise TypeError(f"register_kernel_module() needs a KernelModule, got {module!r}")
    with _lock:
        if module.name in _OWN and module is not _OWN[module.name]:
            raise PluginError(f"the kernel module name {module.name!r} is gpubw's own")
        old = _modules.get(module.name)
        if old is not None:
            if old is module or (
                old.source == module.source
                and old.kernels == module.kernels
                and old.simulate.keys() == module.simulate.keys()
            ):
                if old is not module:
                    _add(module)  # same code; keep the newest simulate functions
                return module
            raise PluginError(
                f"a different kernel module named {module.name!r} is already registered"
            )
        _add(module)
        return module


def unregister_kernel_module(name: str) -> None:
    """Remove a plugin's module (for tests). Unknown names are ignored; the built-in module
    cannot be removed."""
    global _generation
    if name in _OWN:
        raise PluginError(f"the built-in kernel module {name!r} cannot be unregistered")
    with _lock:
        module = _modules.pop(name, None)
        if module is not None:
            for kname in module.names:
                _by_kernel.pop(kname, None)
            _generation += 1


def kernel_modules() -> tuple[KernelModule, ...]:
    """Every registered module in registration order: :data:`PROTOCOL` first, :data:`GPUBW`
    once something declared it."""
    with _lock:
        return tuple(_modules.values())


def find_kernel(name: str) -> tuple[KernelModule, KernelSpec]:
    """The module that defines kernel ``name`` and its spec; KeyError if none does."""
    with _lock:
        module = _by_kernel.get(name)
    if module is None:
        raise KeyError(f"no registered kernel module defines a kernel named {name!r}")
    return module, module.spec(name)


def generation() -> int:
    """A counter that changes whenever the set of registered modules changes (so a loader
    can tell whether it has to load more)."""
    with _lock:
        return _generation


def own_module(name: str) -> KernelModule:
    """gpubw's own module named ``name`` (``"gpubw"`` or ``"gpubw_protocol"``); KeyError for
    another name."""
    return _OWN[name]


def builtin_module(kernel: str) -> KernelModule | None:
    """gpubw's own module that defines ``kernel`` (registered or not), None for another
    name."""
    if kernel not in KERNELS:
        return None
    return PROTOCOL if kernel in PROTOCOL_KERNELS else GPUBW


# gpubw's protocol module is always registered: every System's measurement protocol launches
# its kernels (the spin gate, fill, verify), and a backend may load kernels before any
# testcase has declared what it needs. It is registered the way every other module is;
# GPUBW (the copy kernels, the large unit) when a testcase or the System declares it.
register_kernel_module(PROTOCOL)
