"""One fleet analysis, start to end: gather the reports the paths name, group their nodes
into fleets, compute each fleet's statistics and find what lies below it. The result,
:class:`FleetReport`, is data: :mod:`gpubw.fleet.formats` formats it, the command picks
the exit code from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from gpubw.fleet.findings import Finding, find
from gpubw.fleet.gather import Apart, Gathered, gather
from gpubw.fleet.stats import Fleet, Settings, fleets
from gpubw.model.errors import UsageError
from gpubw.model.options import EXIT_BELOW_EXPECTATION

if TYPE_CHECKING:
    from gpubw.fleet.trends import GpuTrend


@attrs.frozen
class FleetReport:
    """Every fleet with its findings (worst first), the nodes set apart, the files read
    and the settings that judged them; with ``--db --since``, each GPU's trend against its
    own history (:mod:`gpubw.fleet.trends`; None: no history asked)."""

    settings: Settings
    fleets: tuple[Fleet, ...]
    findings: tuple[tuple[Finding, ...], ...]
    apart: tuple[Apart, ...]
    files: int
    history: tuple[GpuTrend, ...] | None = None

    @property
    def all_findings(self) -> list[Finding]:
        """Every fleet's findings together, worst first."""
        found = [f for group in self.findings for f in group]
        return sorted(found, key=lambda f: (f.worst.ratio, f.worst.z, f.node))

    @property
    def nodes(self) -> int:
        """Nodes judged (in a fleet)."""
        return sum(len(f.entries) for f in self.fleets)

    @property
    def exit_code(self) -> int:
        """As ``gpubw check``: 3 when a finding stands or a GPU fell against its own
        history, else 0."""
        fell = any(t.fell for t in self.history or ())
        return EXIT_BELOW_EXPECTATION if any(self.findings) or fell else 0


def judge(gathered: Gathered, settings: Settings) -> FleetReport:
    """The fleets of gathered reports, their statistics and findings. UsageError when no
    fleet can be judged (a health check that judged nothing must not say all is well)."""
    found, apart = fleets(gathered.entries, settings)
    if not found:
        left = gathered.apart + tuple(apart)
        why = f"; {left[0].node}: {left[0].reason}" if left else ""
        raise UsageError(
            f"nothing to judge: no fleet of {settings.min_nodes} node(s) (--min-nodes) of one "
            f"SKU and the same options among {len(gathered.entries)} node(s) of "
            f"{gathered.files} file(s){why}"
        )
    return FleetReport(
        settings=settings,
        fleets=tuple(found),
        findings=tuple(tuple(find(f, settings.threshold)) for f in found),
        apart=gathered.apart + tuple(apart),
        files=gathered.files,
    )


def analyse(
    paths: Sequence[str | Path], settings: Settings | None = None, workers: int | None = None
) -> FleetReport:
    """Read the reports ``paths`` name (files or folders) and judge them."""
    return judge(gather(paths, workers), settings or Settings())
