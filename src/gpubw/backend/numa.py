"""Host memory on a chosen NUMA node, without libnuma: the Linux ``mbind`` and
``get_mempolicy`` system calls through ctypes, and the nodes from sysfs.

``--host-numa`` binds a host buffer's pages to one node (:func:`bind`, ``MPOL_BIND``) before
they are first touched, so every page lands there (or the touch fails: the node has no free
memory); :func:`node_of` asks the kernel where a page is (``get_mempolicy`` with
``MPOL_F_NODE | MPOL_F_ADDR``), which the report records for every measured host buffer.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

NODE_ROOT = Path("/sys/devices/system/node")
#: system call numbers, by machine: (mbind, get_mempolicy)
SYSCALLS = {"x86_64": (237, 239), "aarch64": (235, 236)}
MPOL_BIND = 2
MPOL_MF_STRICT = 1
MPOL_MF_MOVE = 2
MPOL_F_NODE = 1
MPOL_F_ADDR = 2
_ULONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


def nodes(root: Path = NODE_ROOT) -> tuple[int, ...]:
    """The host's NUMA nodes (``nodeN`` folders of ``root``); ``(0,)`` where sysfs has none
    (a kernel without NUMA is one node)."""
    try:
        found = sorted(
            int(p.name[4:]) for p in root.iterdir() if p.name[:4] == "node" and p.name[4:].isdigit()
        )
    except OSError:
        return (0,)
    return tuple(found) or (0,)


def _numbers() -> tuple[int, int]:
    machine = platform.machine()
    if machine not in SYSCALLS:
        raise OSError(f"NUMA placement is not supported on {machine} (no mbind number known)")
    return SYSCALLS[machine]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def bind(addr: int, size: int, node: int) -> None:
    """``mbind(addr, size, MPOL_BIND, {node})``: the range's pages (not touched yet) come from
    ``node`` only. OSError (with errno) when the kernel refuses."""
    mbind_nr, _ = _numbers()
    words = node // _ULONG_BITS + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // _ULONG_BITS] = 1 << (node % _ULONG_BITS)
    libc = _libc()
    rc = libc.syscall(
        ctypes.c_long(mbind_nr),
        ctypes.c_void_p(addr),
        ctypes.c_ulong(size),
        ctypes.c_int(MPOL_BIND),
        mask,
        ctypes.c_ulong(words * _ULONG_BITS + 1),
        ctypes.c_uint(MPOL_MF_STRICT | MPOL_MF_MOVE),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind to NUMA node {node}: {os.strerror(err)}")


def node_of(addr: int) -> int | None:
    """The NUMA node of the page at ``addr`` (touched already); None where the kernel cannot
    say (not Linux, an unknown machine, a page not yet touched)."""
    try:
        _, get_nr = _numbers()
    except OSError:
        return None
    node = ctypes.c_int(-1)
    rc = _libc().syscall(
        ctypes.c_long(get_nr),
        ctypes.byref(node),
        ctypes.c_void_p(None),
        ctypes.c_ulong(0),
        ctypes.c_void_p(addr),
        ctypes.c_ulong(MPOL_F_NODE | MPOL_F_ADDR),
    )
    return int(node.value) if rc == 0 and node.value >= 0 else None
