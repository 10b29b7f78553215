"""When a speculatively decoding sequence gets its tokens, in the simulated engine.

A step gives a decoding sequence `rate` tokens on average (accepted drafts plus the verifier's own,
plan/speculative.py). The simulator hands them out deterministically: after n decode steps a sequence
has emitted floor(n * rate + phase) tokens, with a per-sequence phase in [0, 1) so that sequences do
not burst in lockstep. Each step then gives floor(rate) or ceil(rate) tokens at once (the burst a
client sees as one chunk), the mean is exact, and the token count stays a function of the step
counter: O(1) bookkeeping, finishes known in advance. What this leaves out is the spread of accepted
lengths between steps and between requests (a real step gives 1..k+1 tokens): per-request TPOT
percentiles come out tighter than measured ones.
"""

from __future__ import annotations

import math

GOLDEN = 0.6180339887498949  # phases i * GOLDEN mod 1 spread evenly over [0, 1) for any count


def phase_of(index: int) -> float:
    """The phase of the index-th sequence an engine admits."""
    return (index * GOLDEN) % 1.0


def tokens_after(steps: int, rate: float, phase: float) -> int:
    """Tokens emitted after `steps` decode steps (0 after none)."""
    return math.floor(steps * rate + phase)


def steps_to_emit(tokens: int, rate: float, phase: float) -> int:
    """The fewest decode steps after which at least `tokens` tokens are out (rate >= 1)."""
    if tokens <= 0:
        return 0
    steps = max(1, math.ceil((tokens - phase) / rate))
    # Float rounding may put the estimate one off either way; settle it on the integer rule.
    while tokens_after(steps, rate, phase) < tokens:
        steps += 1
    while steps > 1 and tokens_after(steps - 1, rate, phase) >= tokens:
        steps -= 1
    return steps


def burst_sizes(steps: int, rate: float, phase: float, cap: int) -> list[int]:
    """Tokens of each of `steps` decode steps, the total capped at `cap` (the request's max_tokens left)."""
    out, before = [], 0
    for n in range(1, steps + 1):
        now = min(tokens_after(n, rate, phase), cap)
        out.append(now - before)
        before = now
    return out
