"""How the simulated device side shares bandwidth: the fluid flows of copies over resources
(each host link direction, each device's peer-link send and receive side, each device's
memory, host memory) and their rates while a set of them moves together.

Flows that overlap on a resource share it equally, a link busy in both directions runs at its
bidirectional factor (lower while an SM kernel loads across it:
:func:`~gpubw.backend.sim.model.both_ways_factor`), and host memory is filled up to its
reading and writing bandwidths with writes weighted. :class:`FlowRates` keeps the rates of
the active flows up to date as flows start and end (the engine,
:mod:`gpubw.backend.sim.engine`, is one).
"""

from __future__ import annotations

from gpubw.backend.sim.model import (
    HOSTMEM,
    Resource,
    SimSystem,
    both_ways_factor,
    host_memory_cost,
    link_weight,
    reverse,
    writes_host,
)

#: how many active sets' link shares :class:`FlowRates` keeps (then it starts again)
LEASTS_KEPT = 1 << 16


class Flow:
    __slots__ = (
        "hostmem",
        "jitter",
        "key",
        "link_rate",
        "links",
        "load",
        "peak",
        "rate",
        "remaining",
        "resources",
        "total",
    )

    def __init__(
        self,
        resources: tuple[Resource, ...],
        peak: float,
        nbytes: float,
        jitter: float = 1.0,
        load: bool = False,
    ) -> None:
        self.resources = resources
        self.links = tuple(r for r in resources if r != HOSTMEM)  # shared equally
        self.hostmem = HOSTMEM in resources  # shares the model's host memory bandwidth
        #: an SM kernel loading across its links (their both-ways factor is the load factor)
        self.load = load
        self.jitter = jitter
        self.peak = peak * jitter
        self.remaining = float(nbytes)
        self.total = float(nbytes)
        #: bytes per second while the engine's active flows are what they are: its links'
        #: share (``link_rate``), then host memory's
        self.link_rate = 0.0
        self.rate = 0.0
        #: its resources and load as a small number (:meth:`FlowRates._keys`; -1: not yet)
        self.key = -1


class FlowRates:
    """The rates of the active flows of one modelled system, kept between calls."""

    model: SimSystem

    def _init_rates(self, model: SimSystem) -> None:
        self.model = model
        #: the flows whose rates are set (as given)
        self._rated: list[Flow] = []
        #: the flows the incremental state below counts (those of the last full computation),
        #: how many of them use each resource, and which use it
        self._counted: set[Flow] = set()
        self._count: dict[Resource, int] = {}
        self._users: dict[Resource, set[Flow]] = {}
        self._share: dict[Resource, float] = {}
        #: how many of the flows using each resource are SM loads
        self._loads: dict[Resource, int] = {}
        self._terms: dict[Resource, tuple[Resource | None, float, float]] = {}
        #: a lone flow's counts, loads and shares and its smallest link share, by its
        #: resources and whether it loads (:meth:`_rate_alone`)
        self._lone: dict[
            tuple[tuple[Resource, ...], bool],
            tuple[dict[Resource, int], dict[Resource, int], dict[Resource, float], float],
        ] = {}
        #: each active set's smallest link shares (:meth:`_compute_rates`), by the keys of its
        #: flows in order; flows' keys by their resources and load
        self._leasts: dict[tuple[int, ...], tuple[float, ...]] = {}
        self._key_of: dict[tuple[tuple[Resource, ...], bool], int] = {}
        #: rates were set from kept shares since the counts were last computed
        self._reused = False

    @property
    def _rated_set(self) -> set[Flow]:
        """The flows whose rates are set, as a set."""
        return set(self._rated)

    def _link_terms(self, r: Resource) -> tuple[Resource | None, float, float]:
        """``r``'s other direction and the factors it runs at while that is busy too, without
        and with an SM kernel loading across the link (fixed by the model: looked up once per
        resource)."""
        terms = self._terms.get(r)
        if terms is None:
            rev = reverse(r)
            plain = loaded = 1.0
            if rev is not None:
                plain = both_ways_factor(self.model, r, loads=False)
                loaded = both_ways_factor(self.model, r, loads=True)
            terms = self._terms[r] = (rev, plain, loaded)
        return terms

    def _compute_rates(self, active: list[Flow]) -> None:
        """Every active flow's rate: its peak times its smallest share of a resource (a link
        busy both ways runs at its bidirectional factor), capped by host memory.

        A flow's rate depends only on how many active flows use each of its resources and
        their other directions, so only the flows on a resource that a flow starting or
        ending uses are recomputed (with the same arithmetic: the rates are those of a full
        recomputation, bit for bit). A flow's smallest link share depends only on the
        resources and loads of the active flows, so the shares found for one active set are
        kept by its flows' keys (:meth:`_keys`) and reused for the same set (each rate then
        its peak times its share, as computed; host memory is shared anew)."""
        if active == self._rated:  # the same flows (compared by identity): the same rates
            return
        sig = self._keys(active)
        leasts = self._leasts.get(sig)
        if leasts is not None:
            self._set_rates(active, leasts)
            self._rated = active
            self._reused = True
            return
        if not active or (len(active) == 1 and not self._counted):
            self._rate_alone(active)
        else:
            self._update_rates(active)
        leasts = self._keep_leasts(sig, active)
        if self._reused:
            # rates were set from kept shares since the counts were last computed: a flow
            # the update left alone may hold another set's rate
            self._reused = False
            self._set_rates(active, leasts)

    def _set_rates(self, active: list[Flow], leasts: tuple[float, ...]) -> None:
        """Each active flow's rate from its smallest link share, then host memory's."""
        hostmem = False
        for f, least in zip(active, leasts):
            f.rate = f.link_rate = f.peak * least
            hostmem = hostmem or f.hostmem
        if hostmem and self.model.host_memory_bandwidth is not None:
            self._share_host_memory([f for f in active if f.hostmem])

    def _keys(self, active: list[Flow]) -> tuple[int, ...]:
        """The active flows' keys in order: a number for each flow's resources and load."""
        keys = []
        for f in active:
            k = f.key
            if k < 0:
                k = f.key = self._key_of.setdefault((f.resources, f.load), len(self._key_of))
            keys.append(k)
        return tuple(keys)

    def _keep_leasts(self, sig: tuple[int, ...], active: list[Flow]) -> tuple[float, ...]:
        """Keep each active flow's smallest link share as the full computation just found
        it (the loop of :meth:`_update_rates`), for the next time the same set is active."""
        if len(self._leasts) >= LEASTS_KEPT:
            self._leasts.clear()
        share, out = self._share, []
        for f in active:
            least = 1.0
            for r in f.links:
                if share[r] < least:
                    least = share[r]
            out.append(least)
        kept = self._leasts[sig] = tuple(out)
        return kept

    def _update_rates(self, active: list[Flow]) -> None:
        """The rates of the flows on the resources whose users changed since the last call."""
        was, now = self._counted, set(active)
        count, users, loads = self._count, self._users, self._loads
        dirty: set[Resource] = set()
        for f in was - now:
            for r in f.resources:
                count[r] -= 1
                loads[r] = loads.get(r, 0) - f.load
                users[r].discard(f)
                dirty.add(r)
        for f in now - was:
            for r in f.resources:
                count[r] = count.get(r, 0) + 1
                loads[r] = loads.get(r, 0) + f.load
                users.setdefault(r, set()).add(f)
                dirty.add(r)
        changed: set[Flow] = set()
        for r in dirty:
            changed.update(users.get(r, ()))
            rev = self._link_terms(r)[0]
            if rev is not None:
                changed.update(users.get(rev, ()))
                self._set_share(rev)
            self._set_share(r)
        share = self._share
        for f in changed:  # its peak times its smallest share of its links
            least = 1.0
            for r in f.links:
                if share[r] < least:
                    least = share[r]
            f.rate = f.link_rate = f.peak * least
        if self.model.host_memory_bandwidth is not None and any(f.hostmem for f in changed):
            self._share_host_memory([f for f in active if f.hostmem])
        self._rated, self._counted = active, now

    def _rate_alone(self, active: list[Flow]) -> None:
        """``_compute_rates`` where no flow was rated before and one is now, or none is now
        (between two copies): the most common changes, each a few dictionary updates. What a
        lone flow's resources hold and its smallest link share depend only on its resources
        and whether it loads, so the full computation's result is kept by those (the same
        values, bit for bit; the counts stay as the incremental computation needs them)."""
        count, users, share, loads = self._count, self._users, self._share, self._loads
        if not active:  # every flow ended: nothing shares
            count.clear()
            users.clear()
            share.clear()
            loads.clear()
            self._rated, self._counted = active, set()
            return
        f = active[0]
        key = (f.resources, f.load)
        lone = self._lone.get(key)
        if lone is None:  # the first time: computed in full, from nothing rated
            self._update_rates(active)
            least = 1.0
            for r in f.links:
                least = min(least, share[r])
            lone = self._lone[key] = (dict(count), dict(loads), dict(share), least)
            return
        count.update(lone[0])
        loads.update(lone[1])
        share.update(lone[2])
        for r in lone[0]:
            users[r] = {f}
        f.rate = f.link_rate = f.peak * lone[3]
        if self.model.host_memory_bandwidth is not None and f.hostmem:
            self._share_host_memory([f])
        self._rated, self._counted = active, {f}

    def _set_share(self, r: Resource) -> None:
        """The share of link ``r`` each of its flows gets: its factor (bidirectional while
        its other direction is used too) over the flows using it."""
        n = self._count.get(r, 0)
        if n == 0 or r == HOSTMEM:
            self._share.pop(r, None)
            return
        rev, plain, loaded = self._link_terms(r)
        factor = 1.0
        if rev is not None and self._count.get(rev, 0):
            factor = loaded if self._loads.get(r, 0) or self._loads.get(rev, 0) else plain
        self._share[r] = factor / n

    def _share_host_memory(self, flows: list[Flow]) -> None:
        """Host memory's bandwidth shared by the flows using it (in a fixed order: the rates
        are the same bit for bit on every run): where their links would move more than it
        serves, the rates are filled up evenly to one level (a writing flow's share weighted
        by ``host_memory_write_weight``, each scaled by its jitter), and a flow its links hold
        below the level keeps its link rate and leaves the rest to the others."""
        model = self.model
        budget = model.host_memory_bandwidth
        assert budget is not None
        terms = []
        for f in flows:
            f.rate = f.link_rate
            weight = model.host_memory_write_weight if writes_host(f.resources) else 1.0
            weight *= link_weight(model, f.resources)  # a device's own share (a twin's)
            terms.append((f, host_memory_cost(model, f.resources), weight * f.jitter))
        if sum(cost * f.link_rate for f, cost, _ in terms) <= budget:
            return  # every flow keeps its link rate
        terms.sort(key=lambda t: t[0].link_rate / t[2])
        left, weights = budget, sum(cost * w for _, cost, w in terms)
        for k, (f, cost, w) in enumerate(terms):
            if f.link_rate > w * left / weights:
                level = left / weights
                for g, _, wg in terms[k:]:
                    g.rate = wg * level
                return
            f.rate = f.link_rate
            left -= cost * f.link_rate
            weights -= cost * w
