"""A test that must end: SIGALRM fails it instead of letting it hang, even inside a synchronous loop
(the signal interrupts Python code, which an asyncio timeout cannot)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Hung(Exception):
    pass


@contextmanager
def alarm(seconds: int, doing: str = "running") -> Iterator[None]:
    """Raise Hung("still <doing> after <seconds> s") in the main thread if the block lasts that long."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still {doing} after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
