"""Make gpubw's built-in expectations files (src/gpubw/acceptance/expectations/*.json), one per
data-centre SKU, from the committed H200 reports and the SKUs' public specifications.

    python benchmarks/expectations.py          # rewrite the files
    python benchmarks/expectations.py --check  # exit 1 if a file differs from what it makes

Every rule says where its figure comes from (``basis``, ``source``):

* **measured** -- the H200 SXM only: the worst cell of each group of a committed gpubw report
  on H200s (``benchmarks/results``). The rules of ``h200-sxm.json`` made before issue 21 are
  kept as they are (from h200x2-2026-11-29.json); the testcases they left out come from
  h200x2-2026-12-01.json (2 GPUs: the all_to_* / host_to_all_* / *_to_all_* groups get a wider
  tolerance, since more GPUs share the host and the fabric on larger nodes) and from
  h200x2-multinode-2026-12-01.json (2 ranks).
* **derived** -- every other SKU, and on the H200 what was never measured there: the H200's
  measured figure scaled by the ratio of the two SKUs' public specifications of the link the
  cell crosses (PCIe or C2C per direction for host copies, NVLink per direction for peer
  copies, memory bandwidth for copies inside a GPU). That is the SKU's specification times the
  efficiency gpubw measured on the H200. Pairs of PCIe cards may be bridged by NVLink or
  not: their peer floors are the PCIe path's, which holds either way. Latency has no public
  specification: ceilings are the H200's, 50 % wider (PCIe peers: its host latency's).
  Pageable host copies were not measured yet: their floors are 15 % of the PCIe (or C2C)
  figure. nvbandwidth v0.10's testcases were not measured yet either: the TMA peer copies and
  the TMA local copy take the floors of their SM counterparts (the same bytes over the same
  link), the TMA latency the SM latency's ceiling, 50 % wider (as any derived latency), and
  the local read-only and write-only kernels the local SM copy's read + write floor (the
  memory moves each byte they count once, as a copy's read + write figure counts it).

A derived figure is an estimate, not a measurement: replace it with a measured one (gpubw -j
on a known-good node, then gpubw expect-from) where you have the hardware.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "gpubw" / "acceptance" / "expectations"
RESULTS = ROOT / "benchmarks" / "results"
SINGLE = "h200x2-2026-12-01.json"
MULTINODE = "h200x2-multinode-2026-12-01.json"
#: the public figures of the measured SKU (H200 SXM), per direction, GB/s
H200 = {"host": 64.0, "peer": 450.0, "memory": 4800.0}
#: (share of the PCIe figure, tolerance) of the pageable floors, never measured yet
PAGEABLE_SHARE = 0.15
PCI_IDS_SOURCE = {
    "id": "pci-ids",
    "title": "The PCI ID Repository, vendor 10de (NVIDIA)",
    "url": "https://pci-ids.ucw.cz/read/PC/10de",
    "figures": "the PCI device ids",
}

#: every SKU: file, name, device names as the driver reports them, PCI device ids, the
#: public figures per direction (GB/s; None: no NVLink, peers go over PCIe) and sources
SKUS: list[dict[str, Any]] = [
    {
        "file": "a100-sxm4-40gb", "name": "NVIDIA A100 SXM4 40GB",
        "devices": ["NVIDIA A100-SXM4-40GB"], "ids": ["0x20b0"],
        "host": 32.0, "peer": 300.0, "memory": 1555.0, "host_words": "PCIe Gen4 x16",
        "sources": [("a100", "NVIDIA A100 Tensor Core GPU datasheet",
                     "https://www.nvidia.com/en-us/data-center/a100/",
                     "A100 40GB SXM: 1,555 GB/s HBM2; NVLink 600 GB/s; PCIe Gen4 64 GB/s")],
    },
    {
        "file": "a100-sxm4-80gb", "name": "NVIDIA A100 SXM4 80GB",
        "devices": ["NVIDIA A100-SXM4-80GB"], "ids": ["0x20b2", "0x20b3"],
        "host": 32.0, "peer": 300.0, "memory": 2039.0, "host_words": "PCIe Gen4 x16",
        "sources": [("a100", "NVIDIA A100 Tensor Core GPU datasheet",
                     "https://www.nvidia.com/en-us/data-center/a100/",
                     "A100 80GB SXM: 2,039 GB/s HBM2e; NVLink 600 GB/s; PCIe Gen4 64 GB/s")],
    },
    {
        "file": "a100-pcie-40gb", "name": "NVIDIA A100 PCIe 40GB",
        "devices": ["NVIDIA A100-PCIE-40GB"], "ids": ["0x20f1"],
        "host": 32.0, "peer": None, "memory": 1555.0, "host_words": "PCIe Gen4 x16",
        "sources": [("a100", "NVIDIA A100 Tensor Core GPU datasheet",
                     "https://www.nvidia.com/en-us/data-center/a100/",
                     "A100 40GB PCIe: 1,555 GB/s HBM2; NVLink Bridge 600 GB/s for 2 GPUs; "
                     "PCIe Gen4 64 GB/s")],
    },
    {
        "file": "a100-pcie-80gb", "name": "NVIDIA A100 PCIe 80GB",
        "devices": ["NVIDIA A100 80GB PCIe"], "ids": ["0x20b5"],
        "host": 32.0, "peer": None, "memory": 1935.0, "host_words": "PCIe Gen4 x16",
        "sources": [("a100", "NVIDIA A100 Tensor Core GPU datasheet",
                     "https://www.nvidia.com/en-us/data-center/a100/",
                     "A100 80GB PCIe: 1,935 GB/s HBM2e; NVLink Bridge 600 GB/s for 2 GPUs; "
                     "PCIe Gen4 64 GB/s")],
    },
    {
        "file": "h100-sxm", "name": "NVIDIA H100 SXM",
        "devices": ["NVIDIA H100 80GB HBM3"], "ids": ["0x2330"],
        "host": 64.0, "peer": 450.0, "memory": 3350.0, "host_words": "PCIe Gen5 x16",
        "sources": [("h100", "NVIDIA H100 Tensor Core GPU (product page and datasheet)",
                     "https://www.nvidia.com/en-us/data-center/h100/",
                     "H100 SXM: 3.35 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s")],
    },
    {
        "file": "h100-pcie", "name": "NVIDIA H100 PCIe",
        "devices": ["NVIDIA H100 PCIe"], "ids": ["0x2331"],
        "host": 64.0, "peer": None, "memory": 2000.0, "host_words": "PCIe Gen5 x16",
        "sources": [("h100-pcie", "NVIDIA H100 PCIe GPU product brief (PB-11133-001)",
                     "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/"
                     "h100/PB-11133-001_v01.pdf",
                     "2,000 GB/s HBM2e; NVLink bridge 600 GB/s; PCIe Gen5 x16 128 GB/s")],
    },
    {
        "file": "h100-nvl", "name": "NVIDIA H100 NVL",
        "devices": ["NVIDIA H100 NVL"], "ids": ["0x2321"],
        "host": 64.0, "peer": None, "memory": 3900.0, "host_words": "PCIe Gen5 x16",
        "sources": [("h100", "NVIDIA H100 Tensor Core GPU (product page and datasheet)",
                     "https://www.nvidia.com/en-us/data-center/h100/",
                     "H100 NVL: 3.9 TB/s; NVLink 600 GB/s (bridge); PCIe Gen5 128 GB/s")],
    },
    {
        "file": "h200-nvl", "name": "NVIDIA H200 NVL",
        "devices": ["NVIDIA H200 NVL"], "ids": ["0x233b"],
        "host": 64.0, "peer": None, "memory": 4800.0, "host_words": "PCIe Gen5 x16",
        "sources": [("h200", "NVIDIA H200 Tensor Core GPU (product page and datasheet)",
                     "https://www.nvidia.com/en-us/data-center/h200/",
                     "H200 NVL: 4.8 TB/s; 2- or 4-way NVLink bridge 900 GB/s; PCIe Gen5 "
                     "128 GB/s")],
    },
    {
        "file": "h20", "name": "NVIDIA H20",
        "devices": ["NVIDIA H20"], "ids": ["0x2329"],
        "host": 64.0, "peer": 450.0, "memory": 4000.0, "host_words": "PCIe Gen5 x16",
        "sources": [("h20", "NVIDIA H20 (no public NVIDIA datasheet; the figures NVIDIA's "
                     "partners publish)", "https://willitrunai.com/es/gpus/h20-96gb",
                     "96 GB HBM3 at 4.0 TB/s; NVLink 900 GB/s; PCIe Gen5 x16")],
    },
    {
        "file": "l40s", "name": "NVIDIA L40S",
        "devices": ["NVIDIA L40S"], "ids": ["0x26b9"],
        "host": 32.0, "peer": None, "memory": 864.0, "host_words": "PCIe Gen4 x16",
        "sources": [("l40s", "NVIDIA L40S GPU (product page and datasheet)",
                     "https://www.nvidia.com/en-us/data-center/l40s/",
                     "864 GB/s GDDR6; PCIe Gen4 x16 64 GB/s bidirectional; no NVLink")],
    },
    {
        "file": "b200", "name": "NVIDIA B200 (HGX B200)",
        "devices": ["NVIDIA B200"], "ids": ["0x2901"],
        "host": 64.0, "peer": 900.0, "memory": 8000.0, "host_words": "PCIe Gen5 x16",
        "sources": [("hgx", "NVIDIA HGX platform (HGX B200 specifications)",
                     "https://www.nvidia.com/en-us/data-center/hgx/",
                     "per GPU: up to 8 TB/s HBM3e, NVLink 5 1.8 TB/s"),
                    ("mlperf-b200", "MLCommons inference v6.0, Nebius B200 system "
                     "description", "https://raw.githubusercontent.com/mlcommons/"
                     "inference_results_v6.0/main/closed/Nebius/systems/nebius_b200_n1.json",
                     "accelerator host interconnect: PCIe Gen5 x16")],
    },
    {
        "file": "gb200", "name": "NVIDIA GB200 (GB200 NVL72)",
        "devices": ["NVIDIA GB200"], "ids": ["0x2941"],
        "host": 450.0, "peer": 900.0, "memory": 8000.0, "host_words": "NVLink-C2C",
        "sources": [("gb200", "NVIDIA GB200 NVL72 (product page and datasheet)",
                     "https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
                     "per GPU: 8 TB/s HBM3e (576 TB/s per 72), NVLink 5 1.8 TB/s; "
                     "NVLink-C2C 900 GB/s bidirectional per superchip")],
    },
]  # fmt: skip

#: testcase prefixes whose figures depend on how many GPUs share the host or the fabric
SHARED = ("all_to_host", "host_to_all", "all_to_one", "one_to_all")
SHARED_TOLERANCE = 0.25
DERIVED_TOLERANCE = 0.15
#: derived floors of what the H200's NVLink or its 2 GPUs say little about: copies between
#: PCIe cards (a PCIe switch or root port, both ways at once, is not an NVLink) and the groups
#: that share the host on a larger node
DERIVED_WIDE = 0.35
DERIVED_SHARED = 0.45
#: the H200's host latency ceiling (us), the ceiling of peers that talk over PCIe
H200_HOST_LATENCY = "host_device_latency_sm"


def category(testcase: str, matrix: str, link: str) -> str:
    """Which specification a group's figure follows: host, peer, memory or pageable."""
    if "pageable" in testcase:
        return "pageable"
    if link == "host":
        return "host"
    if link in ("local", "device") and testcase.startswith("device_local"):
        return "memory"
    return "peer"


def _report(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "src"))
    from gpubw.model.report_io import load_report, report_from_dict

    return report_from_dict(load_report(RESULTS / name))


def measured_rules(report_name: str, keys: set[str] | None, tolerance: float) -> list[Any]:
    """Floors (latency ceilings) of a committed report: the worst cell of each group, as
    gpubw expect-from makes them, for the testcases in ``keys`` (None: every one)."""
    from gpubw.acceptance.expect import expect_from
    from gpubw.acceptance.node import peer_links

    report = _report(report_name)
    doc = expect_from(report, 0.0, peer_links=peer_links(report))
    out = []
    for r in doc["rules"]:
        if keys is not None and r["testcase"] not in keys:
            continue
        r = {**r, "basis": "measured", "source": f"benchmarks/results/{report_name}"}
        if r["testcase"].startswith(SHARED) or r["testcase"].startswith("multinode"):
            r["tolerance"] = max(tolerance, SHARED_TOLERANCE)
            r["note"] = "measured on 2 GPUs; more GPUs share the host and the NVLink fabric"
        out.append(r)
    return out


def h200_rules() -> list[dict[str, Any]]:
    """The H200 SXM's rules: the file's own (kept), the groups it lacked from the newer
    reports, and derived ones for what was never measured."""
    old = json.loads((OUT / "h200-sxm.json").read_text())
    kept = [
        {**r, "basis": r.get("basis", "measured"),
         "source": r.get("source", "benchmarks/results/h200x2-2026-11-29.json")}
        for r in old["rules"] if r.get("basis") != "derived" and not _added(r)
    ]  # fmt: skip
    have = {r["testcase"] for r in kept}
    single = measured_rules(SINGLE, None, 0.1)
    added = [r for r in single if r["testcase"] not in have]
    multi = measured_rules(MULTINODE, None, 0.1)
    rules = kept + [{**r, "added": True} for r in added + multi]
    rules += [{**r, "added": True} for r in _unmeasured(rules, H200, "h200")]
    return rules


def _added(rule: dict[str, Any]) -> bool:
    return bool(rule.get("added")) or rule.get("source", "").endswith(("12-01.json",))


def _unmeasured(rules: list[dict[str, Any]], spec: dict[str, Any], src: str) -> list[Any]:
    """Rules for testcases no committed report measured: pageable host copies (a share of
    the host figure) and the multicast broadcasts (the SM peer write figure)."""
    out = []
    host = next(r for r in rules if r["testcase"] == "host_to_device_memcpy_ce")
    h2d, d2h = host["min"], next(r for r in rules if r["testcase"] == "device_to_host_memcpy_ce")
    for key, base in (("host_to_device_pageable_memcpy_ce", h2d),
                      ("device_to_host_pageable_memcpy_ce", d2h["min"])):  # fmt: skip
        out.append(_derived_rule(key, key, "host", round(base * PAGEABLE_SHARE, 4), src,
                                 "not measured yet: 15 % of the pinned copy's floor"))  # fmt: skip
    sm = next(
        (r for r in rules if r["testcase"] == "multinode_device_to_device_memcpy_write_sm"), None
    )
    if sm is not None:
        for key, n in (("multinode_device_to_device_broadcast_one_to_all_sm", 1),
                       ("multinode_device_to_device_broadcast_all_to_all_sm", 2)):  # fmt: skip
            out.append(_derived_rule(key, key, "device", round(sm["min"] * n, 4), src,
                                     "not measured (multicast is off on the lent machine): the "
                                     f"SM peer write floor x {n}"))  # fmt: skip
    return out + _v010(rules, src)


#: nvbandwidth v0.10's testcases none of the committed reports measured: key -> (its nearest
#: measured counterpart, the counterpart's matrix suffix whose floor it takes, or None: all)
V010 = {
    "device_to_device_memcpy_read_tma": ("device_to_device_memcpy_read_sm", None),
    "device_to_device_memcpy_write_tma": ("device_to_device_memcpy_write_sm", None),
    "device_to_device_bidirectional_memcpy_read_tma": (
        "device_to_device_bidirectional_memcpy_read_sm", None),
    "device_to_device_bidirectional_memcpy_write_tma": (
        "device_to_device_bidirectional_memcpy_write_sm", None),
    "device_to_device_latency_tma": ("device_to_device_latency_sm", None),
    "device_local_copy_tma": ("device_local_copy_sm", None),
    "device_local_read_sm": ("device_local_copy_sm", "_read_write"),
    "device_local_write_sm": ("device_local_copy_sm", "_read_write"),
}  # fmt: skip


def _v010(rules: list[dict[str, Any]], src: str) -> list[Any]:
    """Derived rules for nvbandwidth v0.10's testcases, from their SM counterparts (see the
    module docstring): the same floor, or the read + write floor for the one-way kernels; a
    latency ceiling 50 % wider."""
    out = []
    for key, (base, suffix) in V010.items():
        for r in rules:
            if r["testcase"] != base or (suffix and not r["matrix"].endswith(suffix)):
                continue
            matrix = key if suffix else r["matrix"].replace(base, key)
            rule = {**r, "testcase": key, "matrix": matrix, "basis": "derived", "source": src,
                    "tolerance": DERIVED_TOLERANCE, "added": True}  # fmt: skip
            if "max" in r:
                rule["max"] = round(r["max"] * 1.5, 4)
                rule["note"] = f"not measured yet: {r['matrix']}'s ceiling x 1.5"
            else:
                rule["note"] = f"not measured yet: {r['matrix']}'s floor"
            out.append(rule)
    return out


def _derived_rule(key: str, matrix: str, link: str, value: float, src: str, note: str) -> Any:
    return {"testcase": key, "matrix": matrix, "size": 536870912, "link": link, "min": value,
            "unit": "GB/s", "tolerance": DERIVED_TOLERANCE, "basis": "derived", "source": src,
            "note": note}  # fmt: skip


def scaled(rule: dict[str, Any], sku: dict[str, Any], host_latency: float) -> dict[str, Any]:
    """An H200 rule carried to ``sku``: its figure times the ratio of the specifications of
    the link its cells cross (see the module docstring)."""
    cat = category(rule["testcase"], rule["matrix"], rule["link"])
    src = sku["sources"][0][0]
    out = {k: v for k, v in rule.items() if k not in ("added",)}
    out.update(basis="derived", source=src)
    if "max" in rule:  # latency: no public figure
        if sku["peer"] is None and rule["link"] == "peer":
            out["max"] = round(host_latency * 1.5, 4)
            out["note"] = f"derived: peers over PCIe, the H200's {H200_HOST_LATENCY} ceiling x 1.5"
        else:
            out["max"] = round(rule["max"] * 1.5, 4)
            out["note"] = "derived: no public latency figure; the H200's ceiling x 1.5"
        return out
    if cat == "pageable":
        ratio = sku["host"] / H200["host"]
        what = f"{sku['host_words']} {sku['host']:g} GB/s per direction"
    elif cat == "host":
        ratio, what = sku["host"] / H200["host"], f"{sku['host_words']} {sku['host']:g} GB/s"
    elif cat == "memory":
        ratio, what = sku["memory"] / H200["memory"], f"memory {sku['memory']:g} GB/s"
    elif sku["peer"] is None:  # PCIe cards: the PCIe path, bridged pairs are faster
        ratio = sku["host"] / H200["peer"]
        what = f"peers over {sku['host_words']} {sku['host']:g} GB/s (NVLink-bridged pairs: more)"
    else:
        ratio, what = sku["peer"] / H200["peer"], f"NVLink {sku['peer']:g} GB/s per direction"
    out["min"] = round(rule["min"] * ratio, 4)
    wide = sku["peer"] is None and cat == "peer"
    out["tolerance"] = max(rule.get("tolerance", 0.1), DERIVED_TOLERANCE)
    if wide or rule["testcase"].startswith(SHARED):
        out["tolerance"] = DERIVED_SHARED if rule["testcase"].startswith(SHARED) else DERIVED_WIDE
    out["note"] = (
        f"derived: the H200's {rule['min']:g} GB/s ({rule.get('basis', 'measured')}) x "
        f"{ratio:.4g}, the ratio of {what} to the H200's"
    )
    return out


def h200_document() -> dict[str, Any]:
    old = json.loads((OUT / "h200-sxm.json").read_text())
    doc = {
        "format": "gpubw-expect-v1",
        "name": "NVIDIA H200 SXM (built-in)",
        "description": (
            "Floors (and latency ceilings) for the H200 SXM (PCIe Gen5 x16 host links, NVLink 4 "
            "between the GPUs). Measured (basis measured): each limit is the worst cell of its "
            "group in a committed gpubw run on 2 x H200 SXM (benchmarks/results), widened by "
            "the tolerance: 10 % (25 % for the all_to_*, host_to_all_*, *_to_all_* and "
            "multinode groups, measured on 2 GPUs). Derived (basis derived): what no report "
            "measured (pageable copies, multicast broadcasts, nvbandwidth v0.10's TMA and local "
            "one-way testcases). Only the default 512 MiB size is "
            "covered. Made by benchmarks/expectations.py."
        ),
        "devices": old["devices"],
        "pci_device_ids": ["0x2335"],
        "sources": [
            {
                "id": "h200",
                "title": "NVIDIA H200 Tensor Core GPU (product page and datasheet)",
                "url": "https://www.nvidia.com/en-us/data-center/h200/",
                "figures": "H200 SXM: 4.8 TB/s HBM3e; NVLink 900 GB/s; PCIe Gen5 128 GB/s",
            },
            PCI_IDS_SOURCE,
        ],
        "tolerance": 0.1,
        "rules": h200_rules(),
    }
    return doc


def sku_document(sku: dict[str, Any], h200: dict[str, Any]) -> dict[str, Any]:
    peers = "NVLink" if sku["peer"] else "PCIe (NVLink-bridged pairs are faster)"
    host_latency = next(r["max"] for r in h200["rules"] if r["testcase"] == H200_HOST_LATENCY)
    return {
        "format": "gpubw-expect-v1",
        "name": f"{sku['name']} (built-in, derived)",
        "description": (
            f"Floors (and latency ceilings) for the {sku['name']}: {sku['host_words']} host "
            f"links, peers over {peers}, {sku['memory']:g} GB/s memory. Every figure is "
            "derived (no gpubw report on this SKU is committed): the H200 SXM's figure "
            "(h200-sxm.json) times the ratio of the two SKUs' public specifications of the "
            "link the cells cross, widened by at least 15 % (45 % for the groups that share the "
            "host or the fabric, 35 % for peers that are PCIe cards). Replace them with measured "
            "ones "
            "where you have the hardware (gpubw expect-from). Made by benchmarks/expectations.py."
        ),
        "devices": sku["devices"],
        "pci_device_ids": sku["ids"],
        "sources": [
            *({"id": i, "title": t, "url": u, "figures": f} for i, t, u, f in sku["sources"]),
            PCI_IDS_SOURCE,
            {
                "id": "h200",
                "title": "gpubw's built-in H200 SXM expectations (h200-sxm.json)",
                "figures": "the measured efficiencies",
            },
        ],
        "tolerance": DERIVED_TOLERANCE,
        "rules": [scaled(r, sku, host_latency) for r in h200["rules"]],
    }


def documents() -> dict[str, dict[str, Any]]:
    h200 = h200_document()
    clean = {**h200, "rules": [{k: v for k, v in r.items() if k != "added"} for r in h200["rules"]]}
    out = {"h200-sxm.json": clean}
    for sku in SKUS:
        out[f"{sku['file']}.json"] = sku_document(sku, h200)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a file would change")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from gpubw.acceptance.expectations import expectations_from_dict

    stale = []
    for name, doc in documents().items():
        expectations_from_dict(doc, source=name)  # what is written must load
        text = json.dumps(doc, indent=2) + "\n"
        path = OUT / name
        if not path.exists() or path.read_text() != text:
            stale.append(name)
            if not a.check:
                path.write_text(text)
    if a.check and stale:
        print(f"stale: {', '.join(stale)}; run python benchmarks/expectations.py", file=sys.stderr)
        return 1
    print(f"{'would change' if a.check else 'wrote'}: {', '.join(stale) or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
