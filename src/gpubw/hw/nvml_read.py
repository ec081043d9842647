"""Reading the node's facts from NVML (``pynvml``, the nvidia-ml-py package): a
:class:`Session` per run, and one-shot :func:`read_facts` / :func:`read_processes`.

``pynvml`` is imported only when a session first queries, so ``gpubw -l`` never loads it.
Nothing here raises for a missing library, a missing driver or a query a GPU does not
support: the :class:`gpubw.hw.nvml.NodeFacts` say ``available=False`` with the reason, and each
:class:`gpubw.hw.nvml.DeviceFacts` lists the queries that failed in ``unavailable``.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from gpubw.hw.counters import NVLINK_KINDS, read_aer
from gpubw.hw.nvml import (
    INSTALL_HINT,
    THROTTLE_REASONS,
    Clocks,
    DeviceFacts,
    GpuProcess,
    NodeFacts,
    NvLinkState,
    PcieLink,
    normalise_bus_id,
)

T = TypeVar("T")


def _text(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def _reasons(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASONS if mask & bit)


class _Reader:
    """Runs NVML queries for one device, recording the failures instead of raising."""

    def __init__(self, nv: ModuleType) -> None:
        self.nv = nv
        self.failed: list[tuple[str, str]] = []

    def get(self, fact: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:  # NVMLError_NotSupported, NoPermission, a missing symbol...
            self.failed.append((fact, _why(exc)))
            return None


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if text.lower() != "none" else type(exc).__name__


def _device(nv: ModuleType, handle: Callable[[int], Any], index: int, count: int) -> DeviceFacts:
    r = _Reader(nv)
    h = handle(index)
    pci = r.get("pci", lambda: nv.nvmlDeviceGetPciInfo(h))
    pcie = PcieLink(
        r.get("pcie.gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))),
        r.get("pcie.width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))),
        r.get("pcie.max_gen", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
        r.get("pcie.max_width", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
    )
    ecc = r.get("ecc_mode", lambda: nv.nvmlDeviceGetEccMode(h))
    mig = r.get("mig_mode", lambda: nv.nvmlDeviceGetMigMode(h))

    def ecc_errors(kind: int) -> int:
        return int(nv.nvmlDeviceGetTotalEccErrors(h, kind, nv.NVML_VOLATILE_ECC))

    procs = r.get("processes", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)) or []
    bus = normalise_bus_id(pci.busId) if pci is not None else ""
    nvlink = _nvlink(nv, r, h, handle, index, count)
    return DeviceFacts(
        index=index,
        name=_text(r.get("name", lambda: nv.nvmlDeviceGetName(h)) or ""),
        uuid=_text(r.get("uuid", lambda: nv.nvmlDeviceGetUUID(h)) or ""),
        serial=_text(r.get("serial", lambda: nv.nvmlDeviceGetSerial(h)) or ""),
        pci_bus_id=bus,
        vbios=_text(r.get("vbios", lambda: nv.nvmlDeviceGetVbiosVersion(h)) or ""),
        pcie=pcie,
        nvlink=nvlink,
        ecc_enabled=None if ecc is None else bool(ecc[0]),
        ecc_pending=None if ecc is None else bool(ecc[1]),
        ecc_volatile_corrected=r.get(
            "ecc.corrected", lambda: ecc_errors(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED)
        )
        if ecc and ecc[0]
        else None,
        ecc_volatile_uncorrected=r.get(
            "ecc.uncorrected", lambda: ecc_errors(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        )
        if ecc and ecc[0]
        else None,
        persistence_mode=_flag(r.get("persistence", lambda: nv.nvmlDeviceGetPersistenceMode(h))),
        mig_enabled=None if mig is None else bool(mig[0]),
        clocks=_clocks(nv, r, h),
        processes=tuple(
            GpuProcess(int(p.pid), _used(getattr(p, "usedGpuMemory", None))) for p in procs
        ),
        pci_device_id=_product(pci),
        counters=_counters(nv, r, h, bus, nvlink),
        unavailable=tuple(r.failed),
    )


def _product(pci: Any) -> int | None:
    """The PCI device (product) id from NVML's pciDeviceId (device id << 16 | vendor id)."""
    value = getattr(pci, "pciDeviceId", None)
    return int(value) >> 16 if isinstance(value, int) and value > 0 else None


def _counters(
    nv: ModuleType, r: _Reader, h: Any, bus: str, nvlink: NvLinkState | None
) -> dict[str, int]:
    """The health counters (gpubw.hw.counters) that can be read here."""
    out: dict[str, int] = {}
    replay = r.get("counters.pcie_replay", lambda: int(nv.nvmlDeviceGetPcieReplayCounter(h)))
    if replay is not None:
        out["pcie_replay"] = replay
    if bus:
        out.update(read_aer(bus))
    if nvlink is not None and nvlink.errors:
        for k, kind in enumerate(NVLINK_KINDS):
            known = [row[k] for row in nvlink.errors if row[k] is not None]
            if known:
                out[f"nvlink_{kind}"] = sum(v for v in known if v is not None)
    rows = r.get("counters.remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
    if rows is not None:
        corr, unc, pending, failed = (int(x) for x in rows)
        out.update(remapped_rows_correctable=corr, remapped_rows_uncorrectable=unc,
                   remap_pending=int(bool(pending)), remap_failed=int(bool(failed)))  # fmt: skip
    for name, cause in (("retired_pages_sbe", "MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                        ("retired_pages_dbe", "DOUBLE_BIT_ECC_ERROR")):  # fmt: skip
        cause_id = getattr(nv, f"NVML_PAGE_RETIREMENT_CAUSE_{cause}", None)
        pages = None
        if cause_id is not None:
            pages = r.get(f"counters.{name}", _call(nv.nvmlDeviceGetRetiredPages, h, cause_id))
        if pages is not None:
            out[name] = len(pages)
    retiring = r.get("counters.retired_pages_pending",
                     lambda: int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h)))  # fmt: skip
    if retiring is not None:
        out["retired_pages_pending"] = int(bool(retiring))
    return out


def _link_errors(
    nv: ModuleType, r: _Reader, h: Any, links: int
) -> tuple[tuple[int | None, ...], ...]:
    """Each link's error counts (CRC flit, CRC data, replay, recovery); () when NVML does
    not count them (the first failure is recorded once, not per link)."""
    kinds = [getattr(nv, f"NVML_NVLINK_ERROR_DL_{k.upper()}", None) for k in NVLINK_KINDS]
    rows = []
    for link in range(links):
        row: list[int | None] = []
        for kind in kinds:
            try:
                row.append(
                    None if kind is None else int(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, kind))
                )
            except Exception as exc:
                if link == 0 and not any(x is not None for x in row):
                    r.failed.append(("nvlink.errors", _why(exc)))
                    return ()
                row.append(None)
        rows.append(tuple(row))
    return tuple(rows)


def _flag(x: Any) -> bool | None:
    return None if x is None else bool(x)


def _used(x: Any) -> int | None:
    # NVML reports "not available" (e.g. without permission) as a huge sentinel or None
    return int(x) if isinstance(x, int) and 0 <= x < (1 << 62) else None


def _call(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    return lambda: fn(*args)


def _nvlink(
    nv: ModuleType, r: _Reader, h: Any, handle: Callable[[int], Any], index: int, count: int
) -> NvLinkState | None:
    states: list[bool] = []
    versions: list[int] = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            active = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except Exception as exc:  # past the GPU's last link, or no NVLink at all
            if not states:
                r.failed.append(("nvlink", _why(exc)))
                return None
            break
        states.append(active)
        if active:
            v = r.get(f"nvlink.{link}.version", _call(nv.nvmlDeviceGetNvLinkVersion, h, link))
            if v is not None:
                versions.append(int(v))

    def speed() -> int | None:
        fv = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])
        return int(fv[0].value.uiVal) if int(fv[0].nvmlReturn) == 0 else None

    peers = []
    for other in range(count):
        if other == index:
            continue
        try:
            o = handle(other)
            status = nv.nvmlDeviceGetP2PStatus(h, o, nv.NVML_P2P_CAPS_INDEX_NVLINK)
        except Exception as exc:
            r.failed.append((f"nvlink.p2p.{other}", _why(exc)))
            continue
        if status == nv.NVML_P2P_STATUS_OK:
            peers.append(other)
    return NvLinkState(
        links_active=sum(states),
        links_total=len(states),
        speed_mbps=r.get("nvlink.speed", speed) if any(states) else None,
        versions=tuple(versions),
        peers=tuple(peers),
        errors=_link_errors(nv, r, h, len(states)) if any(states) else (),
    )


def _clocks(nv: ModuleType, r: _Reader, h: Any) -> Clocks:
    def mhz(fn: str, clock: str) -> int | None:
        return r.get(f"clocks.{fn}.{clock}", lambda: int(getattr(nv, fn)(h, getattr(nv, clock))))

    def watts(fn: str) -> float | None:
        return r.get(f"power.{fn}", lambda: getattr(nv, fn)(h) / 1000.0)

    def reasons() -> tuple[str, ...]:
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # nvidia-ml-py before the "event reasons" rename
            fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return _reasons(int(fn(h)))

    return Clocks(
        sm_mhz=mhz("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
        memory_mhz=mhz("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
        sm_max_mhz=mhz("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
        memory_max_mhz=mhz("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM"),
        power_w=watts("nvmlDeviceGetPowerUsage"),
        power_limit_w=watts("nvmlDeviceGetEnforcedPowerLimit"),
        temperature_c=r.get(
            "temperature", lambda: int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        ),
        reasons=r.get("clocks.reasons", reasons) or (),
    )


#: nvmlGpuFabricState_t: the GPU's registration with the fabric manager is complete
FABRIC_STATE_COMPLETED = 3


def _fabric_struct(nv: ModuleType, h: Any) -> Any:
    """The GPU's fabric info: ``nvmlDeviceGetGpuFabricInfoV`` (version 2) where the module
    has it, else ``nvmlDeviceGetGpuFabricInfo``; raises what NVML (or a missing name)
    raises."""
    import ctypes

    if hasattr(nv, "nvmlDeviceGetGpuFabricInfoV") and hasattr(nv, "c_nvmlGpuFabricInfoV_t"):
        info = nv.c_nvmlGpuFabricInfoV_t()
        info.version = getattr(nv, "nvmlGpuFabricInfo_v2", info.version)
        nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
        return info
    info = nv.c_nvmlGpuFabricInfo_t()
    nv.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    return info


def fabric_domain(nv: ModuleType, h: Any) -> str | None:
    """The NVLink domain of the GPU with NVML handle ``h``: ``<clusterUuid>/<cliqueId>`` of
    its fabric info once its registration completed; None where NVML lacks the call, the GPU
    is on no fabric (NOT_SUPPORTED: an NVLink within one host, or PCIe) or the registration
    is not complete. Never raises."""
    try:
        info = _fabric_struct(nv, h)
        state = int(info.state)
        status = int(getattr(info, "status", 0))
        cluster = bytes(bytearray(info.clusterUuid))
        clique = int(info.cliqueId)
    except Exception:  # NVMLError_NotSupported, FunctionNotFound, an old module's names
        return None
    if state != FABRIC_STATE_COMPLETED or status != 0 or not any(cluster):
        return None
    return f"{cluster.hex()}/{clique}"


def confidential_compute(nv: ModuleType) -> bool | None:
    """Whether Confidential Computing is on (CPU <-> GPU traffic through encrypted bounce
    buffers): the CC feature of ``nvmlSystemGetConfComputeSettings`` (driver 550 and later)
    or else ``nvmlSystemGetConfComputeState`` (535); None where neither answers (an old
    driver or module: not supported is unknown). Never raises."""
    import ctypes

    enabled = getattr(nv, "NVML_CC_SYSTEM_FEATURE_ENABLED", 1)
    settings_t = getattr(nv, "c_nvmlSystemConfComputeSettings_v1_t", None)
    if settings_t is not None and hasattr(nv, "nvmlSystemGetConfComputeSettings"):
        try:
            settings = settings_t()
            settings.version = getattr(nv, "nvmlSystemConfComputeSettings_v1", settings.version)
            if nv.nvmlSystemGetConfComputeSettings(ctypes.byref(settings)) == 0:
                return int(settings.ccFeature) == enabled
        except Exception:  # FunctionNotFound, NotSupported: try the older query
            pass
    try:
        return int(nv.nvmlSystemGetConfComputeState().ccFeature) == enabled
    except Exception:  # NVMLError_NotSupported, FunctionNotFound, a module without it
        return None


class Session:
    """One NVML initialisation for a whole run: ``nvmlInit`` once, each device's handle and
    PCI bus id looked up once, ``nvmlShutdown`` at :meth:`close`. On the 2 x H200 test
    machine ``nvmlDeviceGetHandleByIndex`` took 4-6 ms a call and init + shutdown 6 ms: asking
    for the processes before and after each of 49 testcases with a fresh initialisation each
    time cost 1.85 s of a 44 s suite. Never raises for a missing library or driver (see
    :func:`read_facts`); thread-safe (one lock), so the facts may be read on a helper thread
    while CUDA starts. ``module`` replaces ``pynvml`` (tests)."""

    def __init__(self, module: ModuleType | None = None) -> None:
        self._module = module
        self._lock = threading.Lock()
        self._nv: ModuleType | None = None
        #: why NVML cannot be used (set once init failed; never retried in this session)
        self._failed: NodeFacts | None = None
        self._handles: dict[int, Any] = {}
        self._bus_ids: dict[int, str] = {}
        self._count: int | None = None

    def _open(self) -> ModuleType | None:
        """The initialised module, or None (and :attr:`_failed`) when NVML cannot be used."""
        if self._nv is not None or self._failed is not None:
            return self._nv
        try:
            nv = self._module if self._module is not None else importlib.import_module("pynvml")
        except ImportError as exc:
            self._failed = NodeFacts(
                False, f"nvidia-ml-py is not installed ({exc}); {INSTALL_HINT}"
            )
            return None
        try:
            nv.nvmlInit()
        except Exception as exc:  # no driver, no permission, libnvidia-ml.so missing
            self._failed = NodeFacts(False, f"NVML could not be initialised: {_why(exc)}")
            return None
        self._nv = nv
        return nv

    def _device_count(self, nv: ModuleType) -> int:
        if self._count is None:
            self._count = int(nv.nvmlDeviceGetCount())
        return self._count

    def handle(self, index: int) -> Any:
        """Device ``index``'s NVML handle (looked up once; raises the NVML error)."""
        h = self._handles.get(index)
        if h is None:
            assert self._nv is not None
            h = self._handles[index] = self._nv.nvmlDeviceGetHandleByIndex(index)
        return h

    def warm(self) -> None:
        """``nvmlInit`` and every device's handle now, reading no device state (a helper
        thread's work while CUDA starts: the facts asked for later are read then, only the
        set-up is done ahead); never raises."""
        with self._lock:
            nv = self._open()
            if nv is None:
                return
            with contextlib.suppress(Exception):  # a later query reports it
                for i in range(self._device_count(nv)):
                    self.handle(i)

    def facts(self) -> NodeFacts:
        """The node's facts now; never raises."""
        with self._lock:
            nv = self._open()
            if nv is None:
                assert self._failed is not None
                return self._failed
            try:
                r = _Reader(nv)
                count = self._device_count(nv)
                devices = []
                for i in range(count):
                    try:
                        devices.append(_device(nv, self.handle, i, count))
                    except Exception as exc:  # the handle itself failed: keep the others
                        devices.append(DeviceFacts(index=i, unavailable=(("device", _why(exc)),)))
                cuda = r.get(
                    "cuda_driver_version", lambda: int(nv.nvmlSystemGetCudaDriverVersion())
                )
                return NodeFacts(
                    available=True,
                    driver_version=_text(r.get("driver", nv.nvmlSystemGetDriverVersion) or ""),
                    nvml_version=_text(r.get("nvml", nv.nvmlSystemGetNVMLVersion) or ""),
                    cuda_driver_version=cuda,
                    devices=tuple(devices),
                    confidential_compute=confidential_compute(nv),
                )
            except Exception as exc:
                return NodeFacts(False, f"NVML query failed: {_why(exc)}")

    def processes(self) -> dict[str, tuple[int, ...]] | None:
        """PCI bus id -> pids of the compute processes NVML lists on each GPU (a quick query,
        for the start and the end of every testcase); None when NVML is not available. Never
        raises; a GPU whose query fails is left out."""
        with self._lock:
            nv = self._open()
            if nv is None:
                return None
            try:
                out = {}
                for i in range(self._device_count(nv)):
                    try:
                        h = self.handle(i)
                        bus = self._bus_ids.get(i)
                        if bus is None:
                            bus = self._bus_ids[i] = normalise_bus_id(
                                nv.nvmlDeviceGetPciInfo(h).busId
                            )
                        procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                    except Exception:
                        continue
                    out[bus] = tuple(int(p.pid) for p in procs)
                return out
            except Exception:
                return None

    def confidential_compute(self) -> bool | None:
        """:func:`confidential_compute`; None where NVML is not available. Never raises."""
        with self._lock:
            nv = self._open()
            return None if nv is None else confidential_compute(nv)

    def fabric_domain(self, pci_bus_id: str) -> str | None:
        """:func:`fabric_domain` of the GPU at ``pci_bus_id``; None where NVML is not
        available or cannot say. Never raises."""
        with self._lock:
            nv = self._open()
            if nv is None:
                return None
            try:
                h = nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
            except Exception:
                return None
            return fabric_domain(nv, h)

    def close(self) -> None:
        """``nvmlShutdown`` if this session initialised NVML; safe to call twice (a later
        query initialises again)."""
        with self._lock:
            nv, self._nv = self._nv, None
            self._handles.clear()
            self._bus_ids.clear()
            self._count = None
            self._failed = None
            if nv is not None:
                with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
                    nv.nvmlShutdown()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_facts(module: ModuleType | None = None) -> NodeFacts:
    """The node's facts from NVML, in a session of their own; never raises. ``module``
    replaces ``pynvml`` (tests)."""
    with Session(module) as session:
        return session.facts()


def read_processes(module: ModuleType | None = None) -> dict[str, tuple[int, ...]] | None:
    """:meth:`Session.processes` in a session of its own."""
    with Session(module) as session:
        return session.processes()
