"""Tests of the NVML node facts (gpubw.hw.nvml), against a fake pynvml module."""

from __future__ import annotations

import ctypes
import re
import socket
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gpubw.hw import nvml, nvml_read


class NVMLError(Exception):
    pass


class NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class FieldValue:
    def __init__(self, ret: int, value: int) -> None:
        self.nvmlReturn = ret
        self.value = types.SimpleNamespace(uiVal=value)


GPUS = [
    {
        "name": b"NVIDIA H200",
        "uuid": "GPU-aaaa",
        "serial": "1650000000001",
        "bus": "00000000:1B:00.0",
        "pcie": (5, 16, 5, 16),
        "links": [1] * 18,
        "nvpeers": [1],
        "ecc": (1, 1),
        "ecc_errors": (3, 0),
        "persistence": 1,
        "mig": (0, 0),
        "reasons": 0x1,
        "procs": [],
    },
    {
        "name": "NVIDIA H200",
        "uuid": "GPU-bbbb",
        "serial": "1650000000002",
        "bus": "00000000:2A:00.0",
        "pcie": (4, 8, 5, 16),
        "links": None,  # NVLink queries not supported
        "nvpeers": [],
        "ecc": (0, 1),
        "ecc_errors": (0, 0),
        "persistence": 0,
        "mig": (1, 1),
        "reasons": 0x4 | 0x40,
        "procs": [(4242, 1 << 30), (77, None)],
    },
]


def fake_pynvml(gpus=GPUS, init_error: Exception | None = None) -> types.ModuleType:
    """A pynvml stand-in answering from ``gpus``; it records init/shutdown calls."""
    m = types.ModuleType("pynvml")
    m.calls = []
    m.NVMLError = NVMLError
    consts = dict(
        NVML_NVLINK_MAX_LINKS=18,
        NVML_VOLATILE_ECC=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        NVML_P2P_CAPS_INDEX_NVLINK=2,
        NVML_P2P_STATUS_OK=0,
        NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON=90,
        NVML_NVLINK_ERROR_DL_REPLAY=0,
        NVML_NVLINK_ERROR_DL_RECOVERY=1,
        NVML_NVLINK_ERROR_DL_CRC_FLIT=2,
        NVML_NVLINK_ERROR_DL_CRC_DATA=3,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
    )
    for k, v in consts.items():
        setattr(m, k, v)

    def init():
        m.calls.append("init")
        if init_error:
            raise init_error

    def links(h):
        if gpus[h]["links"] is None:
            raise NotSupported()
        return gpus[h]["links"]

    def link_state(h, link):
        return links(h)[link]

    def procs(h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=u) for p, u in gpus[h]["procs"]]

    def clock(h, which):
        return {1: 1980, 2: 3201}[which]

    def max_clock(h, which):
        return {1: 1980, 2: 3201}[which]

    def power(h):
        raise NotSupported()

    def p2p(a, b, idx):
        assert idx == 2
        return 0 if b in gpus[a]["nvpeers"] else 4

    def link_errors(h, link, kind):
        return 5 if (link, kind) == (3, 0) else 0  # GPU 0's link 3 replayed 5 times

    def remapped(h):
        if h == 1:
            raise NotSupported()
        return (1, 0, 0, 0)

    def fields(h, ids):
        assert ids == [90]
        return [FieldValue(0, 26562)]

    funcs = dict(
        nvmlInit=init,
        nvmlShutdown=lambda: m.calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: gpus[h]["name"],
        nvmlDeviceGetUUID=lambda h: gpus[h]["uuid"],
        nvmlDeviceGetSerial=lambda h: gpus[h]["serial"],
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(
            busId=gpus[h]["bus"].encode(), pciDeviceId=0x233510DE
        ),
        nvmlDeviceGetPcieReplayCounter=lambda h: 2 * h,
        nvmlDeviceGetNvLinkErrorCounter=link_errors,
        nvmlDeviceGetRemappedRows=remapped,
        nvmlDeviceGetRetiredPages=lambda h, cause: [],
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 0,
        nvmlDeviceGetVbiosVersion=lambda h: "96.00.AF.00.01",
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: gpus[h]["pcie"][0],
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: gpus[h]["pcie"][1],
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: gpus[h]["pcie"][2],
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: gpus[h]["pcie"][3],
        nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetNvLinkVersion=lambda h, link: 4,
        nvmlDeviceGetFieldValues=fields,
        nvmlDeviceGetP2PStatus=p2p,
        nvmlDeviceGetEccMode=lambda h: gpus[h]["ecc"],
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: gpus[h]["ecc_errors"][kind],
        nvmlDeviceGetPersistenceMode=lambda h: gpus[h]["persistence"],
        nvmlDeviceGetMigMode=lambda h: gpus[h]["mig"],
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetMaxClockInfo=max_clock,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000,
        nvmlDeviceGetTemperature=lambda h, s: 41,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: gpus[h]["reasons"],
        nvmlDeviceGetComputeRunningProcesses=procs,
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetNVMLVersion=lambda: b"13.580.159.04",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
    )
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


def test_reads_every_fact_of_every_device():
    """PCIe, NVLink, ECC, persistence, MIG, clocks, ids and processes come through."""
    fake = fake_pynvml()
    facts = nvml_read.read_facts(fake)
    assert facts.available and not facts.simulated
    assert (facts.driver_version, facts.nvml_version) == ("580.159.04", "13.580.159.04")
    assert facts.cuda_driver_version == 13000
    a, _ = facts.devices
    assert (a.name, a.uuid, a.serial, a.pci_bus_id) == (
        "NVIDIA H200",
        "GPU-aaaa",
        "1650000000001",
        "0000:1b:00.0",
    )
    assert a.vbios == "96.00.AF.00.01"
    assert str(a.pcie) == "PCIe Gen5 x16" and not a.pcie.downtrained
    # per link in counters.NVLINK_KINDS order (CRC flit, CRC data, replay, recovery)
    errors = tuple((0, 0, 5, 0) if link == 3 else (0, 0, 0, 0) for link in range(18))
    assert a.nvlink == nvml.NvLinkState(18, 18, 26562, (4,) * 18, (1,), errors)
    assert a.pci_device_id == 0x2335
    assert a.counters["pcie_replay"] == 0 and a.counters["nvlink_replay"] == 5
    assert a.counters["remapped_rows_correctable"] == 1 and a.counters["remap_pending"] == 0
    assert a.counters["retired_pages_dbe"] == 0
    assert str(a.nvlink) == "NVLink 18/18 links active at 26.562 GB/s"
    assert (a.ecc_enabled, a.ecc_volatile_corrected, a.ecc_volatile_uncorrected) == (True, 3, 0)
    assert a.persistence_mode is True and a.mig_enabled is False
    assert a.clocks.sm_mhz == 1980 and a.clocks.reasons == ("gpu_idle",)
    assert a.clocks.slowed == () and a.clocks.power_limit_w == 700.0
    assert a.pids == ()
    assert fake.calls == ["init", "shutdown"]


def test_downtrained_link_mig_processes_and_unsupported_queries():
    """GPU 1: Gen4 x8 of Gen5 x16, ECC off, MIG on, power capped, two processes; queries
    the GPU does not support are listed with the reason, not raised."""
    b = nvml_read.read_facts(fake_pynvml()).devices[1]
    assert str(b.pcie) == "PCIe Gen4 x8, max Gen5 x16"
    assert b.pcie.width_degraded and b.pcie.gen_below_max
    assert b.nvlink is None
    assert b.ecc_enabled is False and b.ecc_pending is True
    assert b.ecc_volatile_corrected is None
    assert b.mig_enabled is True and b.persistence_mode is False
    assert b.clocks.slowed == ("sw_power_cap", "hw_thermal_slowdown")
    assert b.pids == (4242, 77)
    assert b.processes[0].used_bytes == 1 << 30 and b.processes[1].used_bytes is None
    why = dict(b.unavailable)
    assert why["nvlink"] == "Not Supported"
    assert why["counters.remapped_rows"] == "Not Supported"
    assert b.counters["pcie_replay"] == 2 and "remapped_rows_correctable" not in b.counters
    assert why["power.nvmlDeviceGetPowerUsage"] == "Not Supported"
    assert b.clocks.power_w is None


def test_missing_library_is_unavailable_not_an_error(monkeypatch):
    """Without nvidia-ml-py, read_facts says so and how to install it."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    facts = nvml_read.read_facts()
    assert not facts.available
    assert "pip install nvidia-ml-py" in facts.reason and facts.devices == ()


def test_failed_init_is_unavailable_with_the_reason():
    """No driver: NVML's own message is the reason."""
    facts = nvml_read.read_facts(fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    assert not facts.available and "Driver Not Loaded" in facts.reason


def test_one_broken_device_keeps_the_others():
    """A device whose handle fails is recorded as unavailable; the others are read."""
    fake = fake_pynvml()
    real = fake.nvmlDeviceGetHandleByIndex

    def handle(i):
        if i == 0:
            raise NVMLError("GPU is lost")
        return real(i)

    fake.nvmlDeviceGetHandleByIndex = handle
    facts = nvml_read.read_facts(fake)
    assert facts.devices[0].unavailable == (("device", "GPU is lost"),)
    assert facts.devices[1].uuid == "GPU-bbbb"
    assert fake.calls[-1] == "shutdown"


def test_match_devices_pairs_by_bus_id_not_by_index():
    """CUDA ordinals are paired with NVML devices by PCI bus id (CUDA's order may differ)."""
    facts = nvml_read.read_facts(fake_pynvml())
    cuda_devices = [
        {"ordinal": 0, "pci_bus_id": "0000:2a:00.0", "uuid": "GPU-bbbb"},
        {"ordinal": 1, "pci_bus_id": "0000:1b:00.0", "uuid": "GPU-aaaa"},
        {"ordinal": 2, "pci_bus_id": "0000:99:00.0", "uuid": "GPU-none"},
    ]
    matched = nvml.match_devices(facts, cuda_devices)
    assert {o: f.uuid for o, f in matched.items()} == {0: "GPU-bbbb", 1: "GPU-aaaa"}
    assert nvml.peer_link_types(facts, cuda_devices) == {(1, 0): "nvlink", (0, 1): "pcie"}


def test_simulated_facts_from_a_dict_with_a_downtrained_link():
    """facts_from_dict builds the same facts; "gen4 x8 of gen5 x16" is a downtrained link."""
    facts = nvml.facts_from_dict(
        {
            "driver_version": "sim",
            "devices": [
                {"name": "NVIDIA H200", "pcie": "gen5 x16", "pci_bus_id": "00000000:18:00.0",
                 "nvlink": {"links_active": 18, "speed_mbps": 26562, "peers": [1]}},
                {"name": "NVIDIA H200", "pcie": "gen4 x8 of gen5 x16",
                 "nvlink": {"links_active": 17, "links_total": 18, "peers": [0]},
                 "clocks": {"sm_mhz": 1400, "reasons": ["sw_power_cap"]},
                 "processes": [4242, {"pid": 7, "used_bytes": 1024}]},
            ],
        }
    )  # fmt: skip
    a, b = facts.devices
    assert facts.simulated and facts.available
    assert a.pci_bus_id == "0000:18:00.0" and not a.pcie.downtrained
    assert str(b.pcie) == "PCIe Gen4 x8, max Gen5 x16"
    assert str(b.nvlink) == "NVLink 17/18 links active"
    assert b.clocks.slowed == ("sw_power_cap",) and b.pids == (4242, 7)
    assert nvml.peer_link_types(facts) == {(0, 1): "nvlink", (1, 0): "nvlink"}
    d = b.as_dict()
    assert d["pcie"] == {"gen": 4, "width": 8, "max_gen": 5, "max_width": 16}
    assert facts.as_dict()["devices"][1]["processes"][1] == {"pid": 7, "used_bytes": 1024}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"devices": [{"pcie": "gen4"}]}, "genG xW of genG xW"),
        ({"devices": [{"pcie": "gen4 x8 or gen5 x16"}]}, "genG xW"),
        ({"devices": [{"pcei": "gen4 x8"}]}, r"unknown fact\(s\) \['pcei'\]"),
        ({"devices": [{"clocks": {"reasons": ["hot"]}}]}, "unknown clock reason"),
    ],
)
def test_bad_simulated_facts_are_errors(spec, match):
    """A typo in a modelled node's facts is a ValueError naming it."""
    with pytest.raises(ValueError, match=match):
        nvml.facts_from_dict(spec)


def test_bus_id_normalisation():
    """NVML's 8-digit upper-case domain and CUDA's form normalise alike."""
    assert nvml.normalise_bus_id(b"00000000:1B:00.0") == "0000:1b:00.0"
    assert nvml.normalise_bus_id("0000:1b:00.0") == "0000:1b:00.0"


def test_importing_gpubw_nvml_does_not_import_pynvml():
    """pynvml is imported only when facts are read (gpubw -l never loads it)."""
    code = (
        "import sys, gpubw.hw.nvml, gpubw.hw.nvml_read, gpubw.cli.command;"
        "assert 'pynvml' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_nvml_name_used_exists_in_the_real_binding():
    """Each pynvml function and constant gpubw.hw.nvml_read calls exists in nvidia-ml-py."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    source = Path(nvml_read.__file__).read_text(encoding="utf-8")
    names = set(re.findall(r"\bnv\.(nvml\w+|NVML_\w+)", source))
    names |= set(re.findall(r'"(nvmlDevice\w+|NVML_\w+)"', source))
    # optional (newer names), looked for with hasattr/getattr, or (the fabric info, which
    # nvidia-ml-py 11.510, gpubw's minimum, lacks) called where a missing name means "none"
    names -= {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetGpuFabricInfo",
        # Confidential Computing (nvidia-ml-py 12.535 and later), looked for with getattr
        "NVML_CC_SYSTEM_FEATURE_ENABLED",
        "nvmlSystemGetConfComputeSettings",
        "nvmlSystemGetConfComputeState",
    }
    assert len(names) > 25
    missing = sorted(n for n in names if not hasattr(pynvml, n))
    assert missing == []


def test_suspects_explain_a_slow_cell_in_words():
    """suspects() names the facts behind a slow figure, filtered by the cell's link type."""
    a, b = nvml_read.read_facts(fake_pynvml()).devices
    assert nvml.suspects(a) == ()
    assert nvml.suspects(b, "host", own_pid=77) == (
        "PCIe Gen4 x8, max Gen5 x16",
        "clocks held down: sw_power_cap, hw_thermal_slowdown",
        "MIG mode is on",
        "other processes on the GPU: pid 4242",
        "persistence mode is off",
    )
    assert "PCIe Gen4 x8, max Gen5 x16" not in nvml.suspects(b, "device")
    down = nvml.facts_from_dict(
        {"devices": [{"nvlink": {"links_active": 12, "links_total": 18},
                      "ecc_volatile_uncorrected": 2}]}
    ).devices[0]  # fmt: skip
    assert nvml.suspects(down, "peer") == (
        "NVLink 12/18 links active",
        "2 volatile uncorrected ECC errors",
    )
    assert nvml.suspects(down, "host") == ("2 volatile uncorrected ECC errors",)


def test_read_processes_by_bus_id():
    """read_processes: bus id -> pids of each GPU; None without NVML; init and shutdown."""
    fake = fake_pynvml()
    assert nvml_read.read_processes(fake) == {"0000:1b:00.0": (), "0000:2a:00.0": (4242, 77)}
    assert nvml_read.read_processes(fake_pynvml(init_error=NVMLError("no driver"))) is None


def test_device_facts_from_a_report_record():
    """A device record's nvml entry (as_dict form) reads back as the same DeviceFacts."""
    b = nvml_read.read_facts(fake_pynvml()).devices[1]
    back = nvml.device_facts({"nvml": b.as_dict()})
    assert back == b
    assert nvml.device_facts({}) is None and nvml.device_facts({"nvml": {"pcie": "x"}}) is None


def test_session_initialises_once_and_looks_each_handle_up_once():
    """A Session: one nvmlInit, one handle lookup per device, however often it is asked."""
    fake = fake_pynvml()
    lookups = []
    fake.nvmlDeviceGetHandleByIndex = lambda i: lookups.append(i) or i
    session = nvml_read.Session(fake)
    first = session.facts()
    for _ in range(5):
        assert session.processes() == {"0000:1b:00.0": (), "0000:2a:00.0": (4242, 77)}
    assert session.facts() == first and first.available
    assert fake.calls == ["init"] and sorted(lookups) == [0, 1]
    session.close()
    session.close()
    assert fake.calls == ["init", "shutdown"]
    assert session.processes() is not None  # a later query opens a new session
    assert fake.calls == ["init", "shutdown", "init"]


def test_session_remembers_why_nvml_cannot_be_used():
    """A failed nvmlInit is tried once per session; facts say why, processes say None."""
    fake = fake_pynvml(init_error=NVMLError("Driver Not Loaded"))
    with nvml_read.Session(fake) as session:
        assert session.processes() is None
        facts = session.facts()
        assert not facts.available and "Driver Not Loaded" in facts.reason
    assert fake.calls == ["init"]  # no shutdown of what never started


class _FabricInfoV(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t, as nvidia-ml-py lays it out."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    ]


def fabric_pynvml(state: int = 3, status: int = 0, *, has_call: bool = True) -> Any:
    """A pynvml stand-in whose one GPU (0000:1b:00.0) answers the fabric info query with
    ``state`` and ``status`` (or lacks the call)."""
    fake = fake_pynvml()
    fake.nvmlDeviceGetHandleByPciBusId = lambda bus: 0 if bus == b"0000:1b:00.0" else 1 / 0

    def info_v(h: Any, ref: Any) -> int:
        info = ref._obj
        info.clusterUuid[:] = list(range(1, 17))
        info.cliqueId, info.state, info.status = 7, state, status
        return 0

    if has_call:
        fake.c_nvmlGpuFabricInfoV_t = _FabricInfoV
        fake.nvmlGpuFabricInfo_v2 = 2
        fake.nvmlDeviceGetGpuFabricInfoV = info_v
    return fake


def test_fabric_domain_is_the_cluster_uuid_and_clique_once_registered():
    """A GPU whose fabric registration completed is in domain <clusterUuid hex>/<cliqueId>."""
    with nvml_read.Session(fabric_pynvml()) as session:
        assert session.fabric_domain("0000:1b:00.0") == "0102030405060708090a0b0c0d0e0f10/7"


@pytest.mark.parametrize(
    "fake",
    [
        fabric_pynvml(state=2),  # registration in progress
        fabric_pynvml(status=1),  # completed with an error
        fabric_pynvml(has_call=False),  # an NVML (or nvidia-ml-py) without the call
    ],
    ids=["in-progress", "failed", "no-call"],
)
def test_no_fabric_domain_without_a_completed_registration(fake: Any):
    """No domain where the registration is not complete or the call is missing; never
    raises, also for a GPU NVML does not know."""
    with nvml_read.Session(fake) as session:
        assert session.fabric_domain("0000:1b:00.0") is None
        assert session.fabric_domain("0000:99:00.0") is None


def test_a_backend_without_fabric_info_is_its_hosts_domain(monkeypatch: pytest.MonkeyPatch):
    """Backend.nvlink_domain falls back to the host's name where NVML cannot say (no
    library here, no call there), and takes the fabric's domain where it can."""
    from gpubw.backend import base
    from gpubw.backend.sim.presets import from_preset

    sim = from_preset("h200x2")  # a Backend whose devices() is known; the base's method
    assert base.Backend.nvlink_domain(sim, 0) == socket.gethostname()  # no pynvml here
    sim.__dict__["_nvml_session"] = nvml_read.Session(fabric_pynvml(has_call=False))
    assert base.Backend.nvlink_domain(sim, 0) == socket.gethostname()
    sim.__dict__["_nvml_session"] = nvml_read.Session(fabric_pynvml())
    assert base.Backend.nvlink_domain(sim, 0).endswith("0f10/7")
    sim.close()


def test_warm_opens_nvml_and_every_handle_and_reads_no_device_state():
    """Session.warm: nvmlInit and each device's handle, nothing about the devices' state;
    the facts asked for afterwards need no second init or lookup."""
    fake = fake_pynvml()
    lookups, states = [], []
    fake.nvmlDeviceGetHandleByIndex = lambda i: lookups.append(i) or i
    for name in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetClockInfo"):
        real = getattr(fake, name)
        setattr(fake, name, lambda *a, _real=real, _name=name: states.append(_name) or _real(*a))
    session = nvml_read.Session(fake)
    session.warm()
    assert fake.calls == ["init"] and sorted(lookups) == [0, 1] and states == []
    assert session.facts().available and states
    assert fake.calls == ["init"] and sorted(lookups) == [0, 1]
    session.close()


def test_the_prestart_s_nvml_session_is_handed_over_once_and_else_shut_down():
    """The session warmed beside the CUDA start goes to the first taker (warmed on a helper
    thread); one nobody took is shut down when the command settles."""
    from gpubw.backend import cuda_start

    fake = fake_pynvml()
    cuda_start.warm_nvml(fake)
    session = cuda_start.adopt_nvml()
    assert isinstance(session, nvml_read.Session) and fake.calls == ["init"]
    assert cuda_start.adopt_nvml() is None
    session.close()
    left = fake_pynvml()
    cuda_start.warm_nvml(left)
    assert cuda_start.settle() == []
    assert left.calls == ["init", "shutdown"] and cuda_start.adopt_nvml() is None


def test_every_nvml_session_nobody_took_is_shut_down():
    """Two prestarts whose sessions no backend took (a library opening none): settle shuts
    both down, not only the last."""
    from gpubw.backend import cuda_start

    first, second = fake_pynvml(), fake_pynvml()
    cuda_start.warm_nvml(first)
    cuda_start.warm_nvml(second)
    assert cuda_start.settle() == []
    assert first.calls == second.calls == ["init", "shutdown"]
