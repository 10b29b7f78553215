"""Open loop over several worker processes, for when one core cannot send fast enough.

The schedule is dealt round-robin (request i to worker i mod W); every worker runs run_open_loop on
its share against the same absolute start time. time.perf_counter() is CLOCK_MONOTONIC on Linux, one
clock for all processes, so the records merge into one run as if one client had sent them. Workers
start with the `spawn` method (no fork of a process with threads) and wait at a barrier until all have
imported; the parent then sets the start a little ahead. A max-concurrency cap is split evenly.
Records come back when each worker ends (no per-record progress from the workers).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.loadgen.records import RequestRecord

START_AHEAD_S = 0.2  # after the barrier, time for every worker to read the start and enter its loop

_barrier: Any = None
_start: Any = None


def _init(barrier: Any, start: Any) -> None:
    global _barrier, _start
    _barrier, _start = barrier, start


def _work(cfgs: list[ClientConfig], specs: list[RequestSpec], offsets: list[float], cap: int | None,
          balance: Balance) -> list[RequestRecord]:
    _barrier.wait()  # all workers imported; the parent sets the start next
    _barrier.wait()
    return asyncio.run(run_open_loop(cfgs, specs, offsets, cap, balance=balance, start_s=_start.value))


def run_open_loop_workers(
    cfgs: Sequence[ClientConfig],
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    workers: int,
    max_concurrency: int | None = None,
    balance: Balance = "round_robin",
) -> list[RequestRecord]:
    """Like run_open_loop over `workers` processes; returns records in spec order."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    if len(specs) != len(offsets):
        raise ValueError("specs and offsets must have the same length")
    ctx = mp.get_context("spawn")
    barrier, start = ctx.Barrier(workers + 1), ctx.Value("d", 0.0)
    cap = max(1, max_concurrency // workers) if max_concurrency else None
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(barrier, start)) as ex:
        futures = [
            ex.submit(_work, list(cfgs), list(specs[k::workers]), list(offsets[k::workers]), cap, balance)
            for k in range(workers)
        ]
        barrier.wait(timeout=120)
        start.value = time.perf_counter() + START_AHEAD_S
        barrier.wait(timeout=10)
        shares = [f.result() for f in futures]
    out: list[RequestRecord | None] = [None] * len(specs)
    for k, share in enumerate(shares):
        for j, rec in enumerate(share):
            out[k + j * workers] = rec
    return [r for r in out if r is not None]
