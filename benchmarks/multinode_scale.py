"""Time of the multinode testcases on a simulated GB200 rack of N GPUs (ranks emulated in one
process, as ``gpubw --simulate gb200nvl72 -p multinode`` does for N = 72).

    python benchmarks/multinode_scale.py N [--sample-pairs K|FRACTION] [-t KEY ...] [-i S]
        [--racks R] [--each]

N GPUs on hosts of 4, every GPU reaching every other over NVLink (one NVLink domain: the
first N GPUs of the gb200nvl72 preset for N <= 72; beyond 72, a rack of that kind with N
GPUs, as one NVLink domain, which no product of today is); ``--racks R``: N = 72 x R GPUs,
R NVL72 racks, each its own NVLink domain (the gb200nvl72x8 preset for R = 8). Every option
but N is gpubw's default unless given. Prints one line: N, sampling, testcases, wall
seconds, CPU seconds (user + system of this process), the 1-minute load average before and
after, collectives and rank turns, statuses; ``--each`` also each testcase's seconds.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import time

import attrs

from gpubw.backend.sim.model import SimSystem, iter_pairs
from gpubw.backend.sim.presets import GB200_PER_HOST, gb200_device, gb200_racks, gb200nvl72
from gpubw.cli.argtypes import sample_pairs
from gpubw.model.options import RunOptions
from gpubw.runner import core as runner
from gpubw.runner.simulation import Simulation
from gpubw.runner.spec import RunSpec, select
from gpubw.world import tasks


def rack(n: int) -> SimSystem:
    """N GB200 GPUs on hosts of 4, one NVLink domain."""
    if n % GB200_PER_HOST or not 0 < n <= 1024:
        raise SystemExit(f"N must be a multiple of 4 up to 1024 (hosts of 4 GPUs), got {n}")
    full = gb200nvl72()
    devices = tuple(gb200_device(full.name, i) for i in range(n))
    return attrs.evolve(
        full,
        devices=devices,
        host_links=(full.host_links[0],) * n,
        peers=dict.fromkeys(iter_pairs(n), full.peers[(0, 1)]),
        hosts=(GB200_PER_HOST,) * (n // GB200_PER_HOST),
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("n", type=int)
    p.add_argument("--sample-pairs", type=sample_pairs)
    p.add_argument("-t", nargs="+", default=[])
    p.add_argument("-i", type=int, default=RunOptions().samples)
    p.add_argument("--racks", type=int, default=0)
    p.add_argument("--each", action="store_true")
    args = p.parse_args()
    options = RunOptions(
        samples=args.i, sample_pairs=args.sample_pairs, seed=0, world_timeout_s=600.0
    )
    selection, _ = select(args.t, [] if args.t else ["multinode"])
    if args.racks and args.n != 72 * args.racks:
        raise SystemExit(f"--racks {args.racks} needs N = {72 * args.racks}, got {args.n}")
    model = gb200_racks(f"gb200nvl72x{args.racks}", args.racks) if args.racks else rack(args.n)
    hubs: list[tasks.TaskHub] = []
    made = tasks.TaskHub.__init__

    def record(self: tasks.TaskHub, *a: object, **k: object) -> None:
        made(self, *a, **k)  # type: ignore[arg-type]
        hubs.append(self)

    tasks.TaskHub.__init__ = record  # type: ignore[method-assign]
    load, cpu, start = os.getloadavg()[0], _cpu(), time.perf_counter()
    report = runner.run(RunSpec(selection, options, simulation=Simulation("rack", model)))
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    counts = collections.Counter(t.status.value for t in report.testcases)
    what = ",".join(args.t) if args.t else "-p multinode"
    steps = sum(h.steps for h in hubs)
    turns = sum(h.turns for h in hubs)
    print(
        f"N={args.n} sample={args.sample_pairs} {what} wall {seconds:.1f} s cpu {cpu:.1f} s "
        f"load {load:.1f}->{os.getloadavg()[0]:.1f} collectives {steps} turns {turns} "
        f"{dict(counts)}"
    )
    if args.each:
        for t in report.testcases:
            print(f"  {t.key:58} {t.status.value:8} {t.duration_s:8.1f} s")


if __name__ == "__main__":
    main()
