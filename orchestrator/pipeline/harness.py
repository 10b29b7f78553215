"""Is a served simulation trustworthy? The simulated server reports how late its engine loops ran
(orch_sim_* counters on /metrics); when the machine is too busy to keep the simulated clock, the load
point's numbers measure the machine, not the layout, and the sweep says so instead of judging it."""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

# A load point is unreliable when the loops ran late by more than this share of the simulated time.
MAX_BEHIND_SHARE = 0.05


@dataclass(frozen=True)
class HarnessCounters:
    behind_wall_s: float = 0.0
    steps: int = 0
    step_sim_s: float = 0.0

    def __sub__(self, other: HarnessCounters) -> HarnessCounters:
        return HarnessCounters(
            self.behind_wall_s - other.behind_wall_s,
            self.steps - other.steps,
            self.step_sim_s - other.step_sim_s,
        )


def _metrics_url(openai_base_url: str) -> str:
    base = openai_base_url.rstrip("/")
    return (base[: -len("/v1")] if base.endswith("/v1") else base) + "/metrics"


def read_counters(openai_base_urls: Sequence[str]) -> HarnessCounters:
    """Sum of the orch_sim_* counters over every endpoint (zero where a server has none)."""
    behind = step_s = 0.0
    steps = 0
    for url in openai_base_urls:
        try:
            with urllib.request.urlopen(_metrics_url(url), timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "orch_sim_behind_seconds_sum":
                behind += float(value)
            elif name == "orch_sim_steps_total":
                steps += int(float(value))
            elif name == "orch_sim_step_seconds_sum":
                step_s += float(value)
    return HarnessCounters(behind, steps, step_s)


def unreliable_because(delta: HarnessCounters, time_scale: float) -> str | None:
    """A reason when the simulated servers fell behind their clock during a load point."""
    if delta.steps <= 0 or delta.step_sim_s <= 0:
        return None
    share = delta.behind_wall_s / time_scale / delta.step_sim_s
    if share <= MAX_BEHIND_SHARE:
        return None
    return (
        f"unreliable: the simulated servers ran {share:.0%} behind their clock (the machine is too busy "
        f"at time scale {time_scale:g}); rerun on an idle machine or raise engine.time_scale toward 1"
    )
