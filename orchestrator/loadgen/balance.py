"""Spread requests over several endpoints (replicas): round robin, least outstanding, or prefix aware.

One Balancer serves every path that routes: the load generator in front of served replicas (a served
sweep, `orch bench --base-url A,B`) and the simulator in virtual time (sim/virtual.py), so a predicted
hit rate is that of the routing the measurement will use.

- round_robin: each endpoint in turn.
- least_outstanding: the endpoint with the fewest requests in flight, ties in round-robin order so
  that equal endpoints share the load evenly.
- prefix_aware: cache-aware routing as SGLang's model gateway does it (policy `cache_aware`; defaults
  `--cache-threshold 0.3`, `--balance-abs-threshold 64`, `--balance-rel-threshold 1.5`): the balancer
  remembers, per endpoint, the prompt prefixes it sent there (segment chains, loadgen/content.py) and
  sends a request to the endpoint holding its longest prefix when that covers at least
  CACHE_THRESHOLD of the prompt, else to the least loaded. A conversation's turn extends the one
  before it, so a session sticks to the replica that holds its history (session affinity) unless the
  load is out of balance: when the busiest endpoint has more than BALANCE_ABS_THRESHOLD requests more
  than the idlest and more than BALANCE_REL_THRESHOLD times as many, the least loaded wins. The
  gateway sends a request below the threshold to the endpoint with the smallest tree; this one sends
  it to the least loaded. What an endpoint remembers is bounded (MAX_ROUTES chains, least recently
  used forgotten first), as the gateway's tree is pruned. Requests without content (random prompts,
  which share nothing) go to the least loaded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

Balance = Literal["round_robin", "least_outstanding", "prefix_aware"]
BALANCE_KINDS: tuple[Balance, ...] = ("round_robin", "least_outstanding", "prefix_aware")
#: (chain identity, tokens up to it) per segment, root first: loadgen.content.Content.route()
Route = tuple[tuple[int, int], ...]

CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
MAX_ROUTES = 1 << 16


class Balancer:
    """Picks an endpoint index per request; `release` when the request ends."""

    def __init__(self, n: int, kind: Balance = "round_robin", *,
                 ties: Literal["rotate", "first"] = "rotate") -> None:
        if n < 1:
            raise ValueError("need at least one endpoint")
        if kind not in BALANCE_KINDS:
            raise ValueError(f"unknown balance kind {kind!r}; use one of {BALANCE_KINDS}")
        self.kind = kind
        # Among equally loaded endpoints: the next in turn (equal endpoints share the load), or the first
        # (the simulator's least_outstanding, as it always was: its choices then do not flip with the
        # small timing changes a calibration fit makes by moving a constant; bench/sim_served_agreement
        # and the fits of docs/calibration.md were measured so).
        self.ties = ties
        self.outstanding = [0] * n
        self.sent = [0] * n
        self.affine = 0  # prefix_aware: requests sent to the endpoint holding their longest prefix
        self._next = 0
        self._routes: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(n)]

    def acquire(self, route: Route | None = None) -> int:
        n = len(self.outstanding)
        if n == 1:
            i = 0
        elif self.kind == "round_robin":
            i = self._next
        elif self.kind == "prefix_aware" and route:
            i = self._by_prefix(route)
        else:
            i = self._least()
        if self.kind == "prefix_aware" and route and n > 1:
            self._remember(i, route)
        self._next = (i + 1) % n
        self.outstanding[i] += 1
        self.sent[i] += 1
        return i

    def release(self, i: int) -> None:
        self.outstanding[i] -= 1

    def remembered(self, i: int) -> int:
        """prefix_aware: how many prefix chains endpoint i is remembered to hold."""
        return len(self._routes[i])

    def _start(self) -> int:
        return self._next if self.ties == "rotate" else 0

    def _least(self) -> int:
        n, start = len(self.outstanding), self._start()
        return min(range(n), key=lambda j: (self.outstanding[j], (j - start) % n))

    def _by_prefix(self, route: Route) -> int:
        loads = self.outstanding
        hi, lo = max(loads), min(loads)
        if hi - lo > BALANCE_ABS_THRESHOLD and hi > BALANCE_REL_THRESHOLD * lo:
            return self._least()
        best, best_tokens = -1, 0
        n, start = len(loads), self._start()
        for j in sorted(range(n), key=lambda j: (loads[j], (j - start) % n)):  # ties: least loaded
            seen = self._routes[j]
            for chain, tokens in reversed(route):
                if tokens <= best_tokens:
                    break
                if chain in seen:
                    best, best_tokens = j, tokens
                    break
        total = route[-1][1]
        if best >= 0 and best_tokens >= CACHE_THRESHOLD * total:
            self.affine += 1
            return best
        return self._least()

    def _remember(self, i: int, route: Route) -> None:
        seen = self._routes[i]
        for chain, _ in route:
            if chain in seen:
                seen.move_to_end(chain)
            else:
                seen[chain] = None
        while len(seen) > MAX_ROUTES:
            seen.popitem(last=False)
