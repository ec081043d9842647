"""--host-numa: host buffers bound to a NUMA node, the node recorded, a missing node refused."""

from __future__ import annotations

import pytest

from _node import FAST, json_run, run_cli, values
from gpubw.backend import numa
from gpubw.backend.sim.presets import load_system
from gpubw.memory.pool import host_numa_nodes
from gpubw.model.errors import UsageError

H8 = load_system("h200x8").devices  # GPUs 0-3 on node 0, 4-7 on node 1


def test_local_remote_and_a_number_place_each_gpus_buffers():
    """local: the GPU's node; remote: the next other node; N: that node for every GPU."""
    assert host_numa_nodes("local", H8, (0, 1)) == {i: i // 4 for i in range(8)}
    assert host_numa_nodes("remote", H8, (0, 1)) == {i: 1 - i // 4 for i in range(8)}
    assert set(host_numa_nodes("1", H8, (0, 1)).values()) == {1}
    assert host_numa_nodes(None, H8, (0, 1)) == {}


def test_a_node_that_is_not_there_is_refused_naming_the_nodes():
    """A missing node, or remote on a host of one node: UsageError with the nodes there are."""
    with pytest.raises(UsageError, match="there is no NUMA node 3; this host's NUMA nodes: 0, 1"):
        host_numa_nodes("3", H8, (0, 1))
    with pytest.raises(UsageError, match="this host has one NUMA node"):
        host_numa_nodes("remote", H8, (0,))


def test_remote_host_memory_is_slower_and_recorded(capsys, tmp_path):
    """h200x8 (two nodes): remote buffers run below local ones; the nodes are in the notes."""
    argv = ("--simulate", "h200x8", "-t", "0", *FAST)
    _, local, _ = json_run(capsys, tmp_path, *argv, "--host-numa", "local")
    (near,) = values(local, "host_to_device_memcpy_ce")
    _, remote, _ = json_run(capsys, tmp_path, *argv, "--host-numa", "remote")
    (far,) = values(remote, "host_to_device_memcpy_ce")
    assert all(f < n for f, n in zip(far, near))
    notes = dict(remote["testcases"][0]["matrices"][0]["notes"])
    assert notes["host_numa_nodes"] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert remote["options"]["host_numa"] == "remote"


def test_a_missing_node_exits_2_before_anything_runs(capsys):
    """--host-numa 7 on a host of nodes 0 and 1: exit 2, one line, nothing measured."""
    code, out, err = run_cli(capsys, "--simulate", "h200x8", "-t", "0", *FAST, "--host-numa", "7")
    assert code == 2 and "--host-numa 7: there is no NUMA node 7" in err and "Running" not in out


def test_this_hosts_nodes_are_read_from_sysfs():
    """numa.nodes() lists at least one node on Linux; a fresh page's node is one of them."""
    nodes = numa.nodes()
    assert nodes and all(isinstance(n, int) for n in nodes)
