"""Wall time of the multinode testcases on a simulated GB200 rack of N GPUs (ranks emulated in
one process, as ``gpubw --simulate gb200nvl72 -p multinode`` does for N = 72).

    python benchmarks/multinode_scale.py N [--sample-pairs K|FRACTION] [-t KEY ...]

The first N GPUs of the gb200nvl72 preset (hosts of 4) form the rack; every option but N is
gpubw's default unless given. Prints one line: N, sampling, testcases, seconds, statuses.
"""

from __future__ import annotations

import argparse
import collections
import time

import attrs

from gpubw import api
from gpubw.backend.presets import gb200nvl72
from gpubw.backend.sim import SimSystem
from gpubw.measure.sampling import parse_sample_pairs
from gpubw.model.options import RunOptions
from gpubw.runner import core as runner
from gpubw.runner.simulation import Simulation


def rack(n: int) -> SimSystem:
    full = gb200nvl72()
    if n % 4:
        raise SystemExit(f"N must be a multiple of 4 (hosts of 4 GPUs), got {n}")
    return attrs.evolve(
        full,
        devices=full.devices[:n],
        host_links=full.host_links[:n],
        peers={p: r for p, r in full.peers.items() if max(p) < n},
        hosts=(4,) * (n // 4),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int)
    p.add_argument("--sample-pairs", type=parse_sample_pairs)
    p.add_argument("-t", nargs="+", default=[])
    p.add_argument("-i", type=int, default=RunOptions().samples)
    args = p.parse_args()
    options = RunOptions(
        samples=args.i, sample_pairs=args.sample_pairs, seed=0, world_timeout_s=600.0
    )
    selection, _ = api.select(args.t, [] if args.t else ["multinode"])
    model = rack(args.n)
    start = time.perf_counter()
    report = runner.run(runner.RunSpec(selection, options, simulation=Simulation("rack", model)))
    seconds = time.perf_counter() - start
    counts = collections.Counter(t.status.value for t in report.testcases)
    what = ",".join(args.t) if args.t else "-p multinode"
    print(f"N={args.n} sample={args.sample_pairs} {what} {seconds:.1f} s {dict(counts)}")


if __name__ == "__main__":
    main()
