"""Ranks that start together or not at all (``mpirun -np N gpubw ...``).

Before the first testcase every rank of an MPI run agrees on two things (one bounded
collective, :func:`start_together`):

* that its command line was usable: a usage error on any rank (``-b`` twice, a missing
  ``-o`` folder, a bad ``--simulate`` file, ...) ends every rank with exit 2 within the
  world's bound, rank 0 printing the one line ``rank R: <the error>``. A rank with a usage
  error still joins MPI for this (never leaving the others spinning in ``MPI_Init``);
* that every rank runs the same thing (:func:`fingerprint`: the measuring options, the
  selection, the simulated system, the judging): a difference is one line on rank 0 naming
  the option and which ranks have which value, exit 2 everywhere;
* whether a signal reached any rank before it (SIGINT to ``mpirun`` while the ranks still
  start: :mod:`gpubw.cli._startup` records it on an MPI rank instead of exiting): then
  every rank stops before the first testcase and rank 0 writes the interrupted report
  (exit 130/143).

A run without an MPI launcher (one process) never gets here: its usage errors are raised
at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpubw.model.errors import UsageError

if TYPE_CHECKING:
    from gpubw.runner.spec import RunSpec
    from gpubw.world import World

#: the command line's options every rank must give alike, as (fingerprint key, flag)
AGREED = (
    ("buffer_sizes", "-b/--buffer-size"),
    ("samples", "-i/--samples"),
    ("loops", "--loop-count"),
    ("statistic", "-m/--use-mean"),
    ("verify", "-s/--skip-verification"),
    ("affinity", "-d/--disable-affinity"),
    ("gate_timeout_s", "--gate-timeout"),
    ("world_timeout_s", "--world-timeout"),
    ("host_huge_pages", "--host-huge-pages"),
    ("sample_pairs", "--sample-pairs"),
    ("seed", "--seed"),
    ("handle_type", "--handle-type"),
    ("selection", "-t/--testcase, -p/--testcase-prefixes"),
    ("simulate", "--simulate"),
    ("expect", "--expect"),
    ("outlier_pct", "--outlier-pct"),
    ("cv_threshold", "--cv-threshold"),
    ("devices", "--devices, --pair"),
    ("host_numa", "--host-numa"),
    ("wait_idle_s", "--wait-idle"),
    ("soak_s", "--soak"),
    ("soak_drop", "--soak-drop"),
)


def launched_with_ranks() -> bool:
    """Whether an MPI launcher started this process as one of several ranks (or did not
    say how many); reads only the environment."""
    import os

    from gpubw.world.launch_env import several_ranks

    return several_ranks(os.environ)


def fingerprint(ns: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """What every rank must run alike (see :data:`AGREED`), as plain data."""
    o = spec.options
    keys = [getattr(s, "key", getattr(s, "token", "?")) for s in spec.selection]
    return {
        "buffer_sizes": list(o.buffer_sizes),
        "samples": o.samples,
        "loops": o.loops,
        "statistic": o.statistic,
        "verify": o.verify,
        "affinity": o.affinity,
        "gate_timeout_s": o.gate_timeout_s,
        "world_timeout_s": o.world_timeout_s,
        "host_huge_pages": o.host_huge_pages,
        "sample_pairs": repr(o.sample_pairs),
        "seed": o.seed,
        "handle_type": o.handle_type,
        "selection": keys,
        "simulate": ns.simulate,
        "expect": ns.expect,
        "outlier_pct": ns.outlier_pct,
        "cv_threshold": ns.cv_threshold,
        "devices": _devices(o.devices, o.device_pair),
        "host_numa": o.host_numa,
        "wait_idle_s": ns.wait_idle,
        "soak_s": o.soak_s,
        "soak_drop": ns.soak_drop,
    }


def _devices(devices: Sequence[str] | None, pair: bool) -> str:
    """The GPUs a rank measures, as its command line said it (``--pair 0,1``, ``all``)."""
    if devices is None:
        return "all"
    return f"{'--pair' if pair else '--devices'} {','.join(devices)}"


def differences(prints: Sequence[Mapping[str, Any] | None]) -> str | None:
    """The first option the ranks' fingerprints disagree on, in words
    (``--loop-count differs between the ranks: 16 on rank 0; 8 on rank 1``), or None."""
    for key, flag in AGREED:
        by_value: dict[str, list[int]] = {}
        for rank, fp in enumerate(prints):
            if fp is not None:
                by_value.setdefault(repr(fp.get(key)), []).append(rank)
        if len(by_value) > 1:
            parts = [f"{value} on {_ranks(ranks)}" for value, ranks in by_value.items()]
            return f"{flag} differs between the ranks: {'; '.join(parts)}"
    return None


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


@attrs.frozen
class Start:
    """What the ranks agreed before the run: why they cannot start it (``refusal``, the
    lowest rank's usage error or the first difference; None: they can), and the first
    signal any rank got before it (``signum``; the run then stops before it begins, on
    every rank alike, with the interrupted report)."""

    refusal: str | None = None
    signum: int | None = None
    #: the rank whose usage error is the refusal (None: no rank's, or no refusal)
    rank: int | None = None


def start_together(
    world: World, error: BaseException | None, mine: Mapping[str, Any] | None, signum: int | None
) -> Start:
    """The one agreement before the run: every rank's usage error (or None), fingerprint and
    signal so far, gathered (bounded by the world's timeout). A rank that cannot hear the
    others gets why (a WorldError's words) as the refusal."""
    from gpubw.cli.args import usage_message
    from gpubw.world import WorldError

    text = None
    if error is not None:
        text = usage_message(error) if isinstance(error, UsageError) else str(error)
    try:
        gathered = world.allgather((text, None if error is not None else dict(mine or {}), signum))
    except WorldError as exc:
        return Start(f"the ranks could not start together: {exc}")
    signals = [s for _t, _fp, s in gathered if s is not None]
    first = signals[0] if signals else None
    for rank, (failure, _fp, _s) in enumerate(gathered):
        if failure is not None:
            return Start(f"rank {rank}: {failure}", first, rank)
    return Start(differences([fp for _t, fp, _s in gathered]), first)


def refused_with_ranks(error: BaseException | str, prog: str, code: int, said: bool = False) -> int:
    """This MPI rank cannot run (a usage error, an option its flavour refuses, a bad
    simulated system: anything before the run): it still joins the world and the start
    agreement (the others would otherwise wait in MPI_Init, or for it, for ever), so that
    every rank ends with ``code`` at once. Rank 0 says the refusal in one line, unless it is
    its own and ``said`` (the caller has printed it). The one way out of an MPI rank that
    ends before the run, for every entry point (``gpubw``, ``gpubw-nvbandwidth``)."""
    from gpubw.model.console import to_stderr
    from gpubw.runner.ranks import finish
    from gpubw.world import WorldError, world_from_environment

    if isinstance(error, str):
        error = UsageError(error)
    try:
        world = world_from_environment()
    except WorldError as exc:  # no world to join: say both, end alone
        to_stderr(f"{prog}: error: {error}; and MPI could not start: {exc}")
        return code
    start = start_together(world, error, None, None)
    if world.rank == 0 and not (said and start.rank == 0):
        to_stderr(f"{prog}: error: {start.refusal or error}")
    return finish(world, code)
