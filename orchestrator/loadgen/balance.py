"""Spread requests over several endpoints (replicas): round-robin or least-outstanding."""

from __future__ import annotations

from typing import Literal

Balance = Literal["round_robin", "least_outstanding"]
BALANCE_KINDS: tuple[Balance, ...] = ("round_robin", "least_outstanding")


class Balancer:
    """Picks an endpoint index per request; `release` when the request ends.

    least_outstanding picks the endpoint with the fewest requests in flight, ties broken in
    round-robin order so that equal endpoints share the load evenly.
    """

    def __init__(self, n: int, kind: Balance = "round_robin") -> None:
        if n < 1:
            raise ValueError("need at least one endpoint")
        if kind not in BALANCE_KINDS:
            raise ValueError(f"unknown balance kind {kind!r}; use one of {BALANCE_KINDS}")
        self.kind = kind
        self.outstanding = [0] * n
        self.sent = [0] * n
        self._next = 0

    def acquire(self) -> int:
        n = len(self.outstanding)
        if self.kind == "round_robin" or n == 1:
            i = self._next
        else:
            i = min(range(n), key=lambda j: (self.outstanding[j], (j - self._next) % n))
        self._next = (i + 1) % n
        self.outstanding[i] += 1
        self.sent[i] += 1
        return i

    def release(self, i: int) -> None:
        self.outstanding[i] -= 1
