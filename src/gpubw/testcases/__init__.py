"""gpubw's built-in testcases: nvbandwidth v0.10's 44 and its 13 multinode ones, in its order
and with its keys, and gpubw's own. Each is an entry point of ``gpubw.testcases`` (see
pyproject.toml), grouped by family:

* :mod:`.host` -- host <-> device, one device at a time (#0-#3, #16-#19);
* :mod:`.peer` -- device <-> device over every accessible pair (#4-#7, #20-#23, TMA #34-#37);
* :mod:`.host_all` -- host <-> device with every device busy (#8-#11, #24-#27);
* :mod:`.fan` -- all to one, one to all (#12-#15, #28-#31);
* :mod:`.latency` -- pointer-chase latency (#32, #33, TMA #42);
* :mod:`.local` -- inside one device: copies (#38 CE, #39 SM, #43 TMA), read-only (#40) and
  write-only (#41) kernels;
* :mod:`.multinode` -- across the ranks of an MPI run, one GPU per rank (#44-#56);
* :mod:`.pageable` -- host <-> device from and to pageable host memory (#57, #58).

The shapes they share (1 x N, N x N, bidirectional, all to one, host traffic) are in
:mod:`.shapes`.

:data:`BUILTINS` is the one list of them, in list order: the registry gives gpubw's testcases
their indexes in this order (entry points come in no guaranteed order), and pyproject.toml's
``gpubw.testcases`` entry points must name exactly these (tests/test_registry.py checks it).
A key is the entry-point name; no class states its own key. To add a group of testcases,
add a tuple below and put it into :data:`BUILTINS` where its indexes belong.

Before v0.10 (gpubw 0.x up to issue 35) the list followed nvbandwidth v0.8: ``device_local_copy``
was 34, the multinode testcases 35-47, ``device_local_copy_sm`` 48 and the pageable ones 49
and 50 (README, "Changes").
"""

from __future__ import annotations

#: nvbandwidth v0.10's 44 testcases in its order (indexes 0-43, so ``-t 34`` names the same
#: testcase in both tools): (key, ``"module:Class"``).
NVBANDWIDTH: tuple[tuple[str, str], ...] = (
    ("host_to_device_memcpy_ce", "gpubw.testcases.host:HostToDeviceCE"),
    ("device_to_host_memcpy_ce", "gpubw.testcases.host:DeviceToHostCE"),
    ("host_to_device_bidirectional_memcpy_ce", "gpubw.testcases.host:HostToDeviceBidirectionalCE"),
    ("device_to_host_bidirectional_memcpy_ce", "gpubw.testcases.host:DeviceToHostBidirectionalCE"),
    ("device_to_device_memcpy_read_ce", "gpubw.testcases.peer:DeviceToDeviceReadCE"),
    ("device_to_device_memcpy_write_ce", "gpubw.testcases.peer:DeviceToDeviceWriteCE"),
    (
        "device_to_device_bidirectional_memcpy_read_ce",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalReadCE",
    ),
    (
        "device_to_device_bidirectional_memcpy_write_ce",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalWriteCE",
    ),
    ("all_to_host_memcpy_ce", "gpubw.testcases.host_all:AllToHostCE"),
    ("all_to_host_bidirectional_memcpy_ce", "gpubw.testcases.host_all:AllToHostBidirectionalCE"),
    ("host_to_all_memcpy_ce", "gpubw.testcases.host_all:HostToAllCE"),
    ("host_to_all_bidirectional_memcpy_ce", "gpubw.testcases.host_all:HostToAllBidirectionalCE"),
    ("all_to_one_write_ce", "gpubw.testcases.fan:AllToOneWriteCE"),
    ("all_to_one_read_ce", "gpubw.testcases.fan:AllToOneReadCE"),
    ("one_to_all_write_ce", "gpubw.testcases.fan:OneToAllWriteCE"),
    ("one_to_all_read_ce", "gpubw.testcases.fan:OneToAllReadCE"),
    ("host_to_device_memcpy_sm", "gpubw.testcases.host:HostToDeviceSM"),
    ("device_to_host_memcpy_sm", "gpubw.testcases.host:DeviceToHostSM"),
    ("host_to_device_bidirectional_memcpy_sm", "gpubw.testcases.host:HostToDeviceBidirectionalSM"),
    ("device_to_host_bidirectional_memcpy_sm", "gpubw.testcases.host:DeviceToHostBidirectionalSM"),
    ("device_to_device_memcpy_read_sm", "gpubw.testcases.peer:DeviceToDeviceReadSM"),
    ("device_to_device_memcpy_write_sm", "gpubw.testcases.peer:DeviceToDeviceWriteSM"),
    (
        "device_to_device_bidirectional_memcpy_read_sm",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalReadSM",
    ),
    (
        "device_to_device_bidirectional_memcpy_write_sm",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalWriteSM",
    ),
    ("all_to_host_memcpy_sm", "gpubw.testcases.host_all:AllToHostSM"),
    ("all_to_host_bidirectional_memcpy_sm", "gpubw.testcases.host_all:AllToHostBidirectionalSM"),
    ("host_to_all_memcpy_sm", "gpubw.testcases.host_all:HostToAllSM"),
    ("host_to_all_bidirectional_memcpy_sm", "gpubw.testcases.host_all:HostToAllBidirectionalSM"),
    ("all_to_one_write_sm", "gpubw.testcases.fan:AllToOneWriteSM"),
    ("all_to_one_read_sm", "gpubw.testcases.fan:AllToOneReadSM"),
    ("one_to_all_write_sm", "gpubw.testcases.fan:OneToAllWriteSM"),
    ("one_to_all_read_sm", "gpubw.testcases.fan:OneToAllReadSM"),
    ("host_device_latency_sm", "gpubw.testcases.latency:HostDeviceLatencySM"),
    ("device_to_device_latency_sm", "gpubw.testcases.latency:DeviceToDeviceLatencySM"),
    ("device_to_device_memcpy_read_tma", "gpubw.testcases.peer:DeviceToDeviceReadTMA"),
    ("device_to_device_memcpy_write_tma", "gpubw.testcases.peer:DeviceToDeviceWriteTMA"),
    (
        "device_to_device_bidirectional_memcpy_read_tma",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalReadTMA",
    ),
    (
        "device_to_device_bidirectional_memcpy_write_tma",
        "gpubw.testcases.peer:DeviceToDeviceBidirectionalWriteTMA",
    ),
    ("device_local_copy", "gpubw.testcases.local:DeviceLocalCopy"),
    ("device_local_copy_sm", "gpubw.testcases.local:DeviceLocalCopySM"),
    ("device_local_read_sm", "gpubw.testcases.local:DeviceLocalReadSM"),
    ("device_local_write_sm", "gpubw.testcases.local:DeviceLocalWriteSM"),
    ("device_to_device_latency_tma", "gpubw.testcases.latency:DeviceToDeviceLatencyTMA"),
    ("device_local_copy_tma", "gpubw.testcases.local:DeviceLocalCopyTMA"),
)

#: nvbandwidth's 13 multinode testcases, after v0.10's 44 (indexes 44-56: where a v0.10
#: multinode build puts them, a guess; v0.8's were 35-47); waived unless the run has 2 or
#: more ranks.
MULTINODE: tuple[tuple[str, str], ...] = (
    ("multinode_device_to_device_memcpy_read_ce", "gpubw.testcases.multinode:MultinodeReadCE"),
    ("multinode_device_to_device_memcpy_write_ce", "gpubw.testcases.multinode:MultinodeWriteCE"),
    (
        "multinode_device_to_device_bidirectional_memcpy_read_ce",
        "gpubw.testcases.multinode:MultinodeBidirectionalReadCE",
    ),
    (
        "multinode_device_to_device_bidirectional_memcpy_write_ce",
        "gpubw.testcases.multinode:MultinodeBidirectionalWriteCE",
    ),
    ("multinode_device_to_device_memcpy_read_sm", "gpubw.testcases.multinode:MultinodeReadSM"),
    ("multinode_device_to_device_memcpy_write_sm", "gpubw.testcases.multinode:MultinodeWriteSM"),
    (
        "multinode_device_to_device_bidirectional_memcpy_read_sm",
        "gpubw.testcases.multinode:MultinodeBidirectionalReadSM",
    ),
    (
        "multinode_device_to_device_bidirectional_memcpy_write_sm",
        "gpubw.testcases.multinode:MultinodeBidirectionalWriteSM",
    ),
    (
        "multinode_device_to_device_all_to_one_write_sm",
        "gpubw.testcases.multinode:MultinodeAllToOneWriteSM",
    ),
    (
        "multinode_device_to_device_all_from_one_read_sm",
        "gpubw.testcases.multinode:MultinodeAllFromOneReadSM",
    ),
    (
        "multinode_device_to_device_broadcast_one_to_all_sm",
        "gpubw.testcases.multinode:MultinodeBroadcastOneToAllSM",
    ),
    (
        "multinode_device_to_device_broadcast_all_to_all_sm",
        "gpubw.testcases.multinode:MultinodeBroadcastAllToAllSM",
    ),
    ("multinode_bisect_write_ce", "gpubw.testcases.multinode:MultinodeBisectWriteCE"),
)

#: gpubw's own testcases (not in nvbandwidth), after nvbandwidth's (indexes 57 and on).
#: New testcases always go last: the indexes of the existing ones are what scripts and saved
#: reports name them by.
GPUBW_OWN: tuple[tuple[str, str], ...] = (
    # issue 21: pageable host memory (57, 58)
    ("host_to_device_pageable_memcpy_ce", "gpubw.testcases.pageable:HostToDevicePageableCE"),
    ("device_to_host_pageable_memcpy_ce", "gpubw.testcases.pageable:DeviceToHostPageableCE"),
)

#: Every built-in testcase as (key = entry-point name, ``"module:Class"``), in list order.
BUILTINS: tuple[tuple[str, str], ...] = NVBANDWIDTH + MULTINODE + GPUBW_OWN
