"""--devices and --pair: GPUs by index, UUID (prefix) or PCI bus id; other cells absent."""

from __future__ import annotations

import pytest

from _node import FAST, json_run, run_cli, values
from gpubw.backend.sim.presets import load_system
from gpubw.memory import selection
from gpubw.model.errors import UsageError

DEVICES = load_system("h200x8").devices


def test_tokens_name_gpus_by_index_uuid_prefix_and_bus_id():
    """An index, a UUID with or without GPU-, a prefix and three bus id spellings."""
    d2, d3 = DEVICES[2], DEVICES[3]
    prefix = d2.uuid[:8]
    bus = d3.pci_bus_id  # 0000:61:00.0
    assert selection.resolve(["5"], DEVICES).ordinals == {5}
    assert selection.resolve([d2.uuid.upper()], DEVICES).ordinals == {2}
    assert selection.resolve([prefix, prefix[4:]], DEVICES).ordinals == {2}
    for spelling in (bus, "00000000:61:00.0", "61:00", "0000:61:00"):
        assert selection.resolve([spelling], DEVICES).ordinals == {3}, spelling


def test_an_unknown_or_ambiguous_token_is_one_clear_error():
    """No such GPU, or a UUID prefix of several: the token and the GPUs there are."""
    with pytest.raises(UsageError, match=r"--devices 9: no GPU is '9'.*GPUs: 0 \("):
        selection.resolve(["9"], DEVICES)
    with pytest.raises(UsageError, match="is the start of the UUID of GPUs 0, 1"):
        selection.resolve(["GPU-1"], DEVICES)
    with pytest.raises(UsageError, match="a pair is two different GPUs"):
        selection.resolve(["1", "1"], DEVICES, flag="--pair")


def test_under_mpi_a_uuid_of_another_host_is_left_to_the_other_ranks():
    """lenient: a UUID no GPU here has is kept for the other ranks; an index is not."""
    found = selection.resolve(["0", "GPU-ffff"], DEVICES, lenient=True)
    assert found.ordinals == {0} and found.unmatched == ("GPU-ffff",)
    with pytest.raises(UsageError):
        selection.resolve(["9"], DEVICES, lenient=True)


def test_pair_by_uuid_measures_both_directions_and_keeps_the_real_indexes(capsys, tmp_path):
    """--pair UUID,bus: cells 2->3 and 3->2 only; the others null, the record says so."""
    pair = f"{DEVICES[2].uuid[:10]},{DEVICES[3].pci_bus_id}"
    argv = ("--simulate", "h200x8", "-t", "device_to_device_memcpy_read_ce", *FAST)
    code, doc, err = json_run(capsys, tmp_path, *argv, "--pair", pair)
    assert code == 0, err
    grid = values(doc, "device_to_device_memcpy_read_ce")
    measured = {(i, j) for i, row in enumerate(grid) for j, v in enumerate(row) if v is not None}
    assert measured == {(2, 3), (3, 2)} and len(grid) == 8
    assert doc["options"]["device_pair"] is True


def test_devices_on_a_host_testcase_leaves_the_other_columns_null(capsys, tmp_path):
    """--devices 1,6 on host -> GPU: columns 1 and 6 measured, every other one null."""
    code, doc, err = json_run(capsys, tmp_path, "--simulate", "h200x8", "-t", "0", *FAST,
                              "--devices", "1,6")  # fmt: skip
    assert code == 0, err
    (row,) = values(doc, "host_to_device_memcpy_ce")
    assert [j for j, v in enumerate(row) if v is not None] == [1, 6]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--devices", "9"], "no GPU is '9'"),
        (["--pair", "1"], "a pair is two GPUs"),
        (["--devices", "0,,1"], "not a comma list of GPUs"),
        (["--devices", "0", "--pair", "0,1"], "give one of them"),
    ],
)
def test_bad_selections_exit_2_before_anything_runs(capsys, argv, words):
    """One line naming the value and what is allowed; exit 2; nothing measured."""
    code, out, err = run_cli(capsys, "--simulate", "h200x8", "-t", "0", *FAST, *argv)
    assert code == 2 and words in err and "Running" not in out


def test_multinode_devices_by_uuid_across_hosts():
    """4 simulated ranks on 2 hosts: --devices with a UUID of each host measures the pair of
    their ranks (0 and 3) only; a UUID no rank has is every rank's usage error."""
    from _ranked import model, ranked_report
    from gpubw.model.options import RunOptions

    rack = model("gb200nvl72").devices
    key = "multinode_device_to_device_memcpy_read_ce"
    options = RunOptions(buffer_sizes=(1 << 20,), samples=1, loops=1,
                         devices=(rack[0].uuid, rack[5].uuid[:13]))  # fmt: skip
    report = ranked_report("gb200nvl72", [2, 2], options, testcases=[key], timeout_s=60)
    (grid,) = [m.values for t in report.testcases for m in t.matrices]
    measured = {(i, j) for i, row in enumerate(grid) for j, v in enumerate(row) if v is not None}
    assert measured == {(0, 3), (3, 0)}
    nowhere = RunOptions(buffer_sizes=(1 << 20,), samples=1, loops=1, devices=("GPU-ffff",))
    with pytest.raises(UsageError, match="no rank has a GPU 'GPU-ffff'"):
        ranked_report("gb200nvl72", [2, 2], nowhere, testcases=[key], timeout_s=60)
