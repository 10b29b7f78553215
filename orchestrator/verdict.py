"""A load point's verdict as a value: passed, failed (why), or unjudged (why it could not be judged:
the measurement itself is not trustworthy, e.g. a served simulation that lost its clock).

The store, JSON output and reports keep a verdict as (passed, text): text "" for a pass, the SLO
failure for a fail, and the reason for an unjudged point, which says "unreliable: ..." first. `of`
reads such a pair back; it is the one place that knows how an unjudged point is spelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["passed", "failed", "unjudged"]
UNJUDGED_PREFIX = "unreliable"  # how a stored verdict text marks a point that could not be judged


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str = ""  # why it failed or could not be judged; "" when it passed

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def judged(self) -> bool:
        return self.status != "unjudged"

    @classmethod
    def of(cls, passed: bool | None, text: str | None) -> Verdict:
        """A stored (passed, text) pair as a verdict; no SLO (passed None) counts as passed."""
        text = text or ""
        if text.startswith(UNJUDGED_PREFIX):
            return cls("unjudged", text)
        if passed is False or (passed is None and text):
            return cls("failed", text)
        return cls("passed")

    @classmethod
    def unjudged(cls, why: str) -> Verdict:
        """A point whose numbers measure the machine, not the layout; `why` is said to people."""
        return cls("unjudged", why if why.startswith(UNJUDGED_PREFIX) else f"{UNJUDGED_PREFIX}: {why}")

    @property
    def text(self) -> str:
        """What the store keeps beside `passed`."""
        return self.reason


__all__ = ["UNJUDGED_PREFIX", "Status", "Verdict"]
