"""Is a served simulation trustworthy? The simulated server reports how late its engine loops ran
(orch_sim_* counters on /metrics); when the machine is too busy to keep the simulated clock, the load
point's numbers measure the machine, not the layout, and the sweep says so instead of judging it."""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.verdict import Verdict

# A load point is unreliable when clock restarts lost more than this share of the simulated time, or
# when tokens went out late on average by more than MAX_LATE_SHARE of the tightest SLO bound (and at
# least MIN_LATE_MS): epoll wakes timers up to 1 ms late, which is noise against a 100 ms bound but
# not against a 2 ms one.
MAX_LOST_SHARE = 0.05
MAX_LATE_SHARE = 0.05
MIN_LATE_MS = 2.0


@dataclass(frozen=True)
class HarnessCounters:
    behind_wall_s: float = 0.0  # tokens sent late, summed over steps (jitter)
    steps: int = 0
    step_sim_s: float = 0.0
    lost_wall_s: float = 0.0  # given up when a loop fell too far behind (drift)

    def __sub__(self, other: HarnessCounters) -> HarnessCounters:
        return HarnessCounters(
            self.behind_wall_s - other.behind_wall_s,
            self.steps - other.steps,
            self.step_sim_s - other.step_sim_s,
            self.lost_wall_s - other.lost_wall_s,
        )


def _metrics_url(openai_base_url: str) -> str:
    base = openai_base_url.rstrip("/")
    return (base[: -len("/v1")] if base.endswith("/v1") else base) + "/metrics"


def read_counters(openai_base_urls: Sequence[str]) -> HarnessCounters:
    """Sum of the orch_sim_* counters over every endpoint (zero where a server has none)."""
    total: dict[str, float] = {}
    for url in openai_base_urls:
        try:
            with urllib.request.urlopen(_metrics_url(url), timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("orch_sim_"):
                total[name] = total.get(name, 0.0) + float(value)
    return HarnessCounters(
        total.get("orch_sim_behind_seconds_sum", 0.0),
        int(total.get("orch_sim_steps_total", 0.0)),
        total.get("orch_sim_step_seconds_sum", 0.0),
        total.get("orch_sim_lost_seconds_sum", 0.0),
    )


def unreliable_because(
    delta: HarnessCounters, time_scale: float, tightest_bound_ms: float | None = None
) -> str | None:
    """A reason when the simulated servers could not keep their clock during a load point."""
    if delta.steps <= 0 or delta.step_sim_s <= 0:
        return None
    lost = delta.lost_wall_s / time_scale / delta.step_sim_s
    late_ms = delta.behind_wall_s / delta.steps / time_scale * 1e3
    late_limit = max(MIN_LATE_MS, MAX_LATE_SHARE * tightest_bound_ms) if tightest_bound_ms else MIN_LATE_MS
    if lost <= MAX_LOST_SHARE and late_ms <= late_limit:
        return None
    return Verdict.unjudged(
        f"the simulated servers lost {lost:.0%} of their clock and sent tokens {late_ms:.1f} ms "
        f"late on average (the machine is too busy at time scale {time_scale:g}); rerun on an idle machine "
        "or raise engine.time_scale toward 1"
    ).text
