"""Plumbing of the side-by-side sweep: one load generator per layout in its own process, and the
calls of the layouts' threads that must run on the main thread.

Each co-running layout gets a process of its own (multiprocessing, spawn: a fresh interpreter, no
inherited threads or event loops) that runs its load points with pipeline/served.bench_point, so one
layout's client never waits on the other's for the GIL or the event loop. Records go back over a
pipe; the store, which is not safe across processes or threads (sqlite3 connections belong to their
thread), and the progress display are only touched on the main thread (MainThreadCalls)."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar, cast

from orchestrator.errors import DeployError, OrchError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.repeats import reseeded
from orchestrator.pipeline.served import bench_point
from orchestrator.pipeline.serving import Cancelled
from orchestrator.spec.models import SweepSpec

POLL_S = 0.2
PROGRESS_S = 0.25  # the worker's progress messages, at most this often per point
STOP_GRACE_S = 5.0


class StopFlag(Protocol):
    """Set when the point must stop (the serve step's Cancel; a threading.Event will do)."""

    def is_set(self) -> bool: ...


class ProgressForward:
    """The worker's progress: the point's completed requests go to the parent over the pipe (at most
    every PROGRESS_S, and the last one), where `LoadgenProcess.point` hands them to its caller."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.label, self.done, self.sent_at = conn, "", 0, 0.0
        self.total_: int | None = None

    def point_start(self, layout: str, label: str, total: int | None) -> None:
        self.begin(label, total)

    def begin(self, label: str, total: int | None) -> None:
        self.label, self.total_, self.done = label, total, 0
        self._send()

    def append(self, rec: RequestRecord, /) -> None:
        self.done += 1
        if time.monotonic() - self.sent_at >= PROGRESS_S or self.done == self.total_:
            self._send()

    def _send(self) -> None:
        self.sent_at = time.monotonic()
        self.conn.send(("progress", self.label, self.done, self.total_))


def _serve(
    conn: Connection, spec: SweepSpec, clients: tuple[ClientConfig, ...], layout: Layout, scale: float,
    interval_s: float,
) -> None:
    """The worker: one load point per request on the pipe, until None or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops us
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        point, num_requests, k = msg
        try:
            result, series = bench_point(
                reseeded(spec, k), ProgressForward(conn), clients, layout, point, num_requests, scale,
                interval_s,
            )
        except (OrchError, OSError) as exc:
            conn.send(("failed", str(exc)))
        except Exception:
            conn.send(("bug", traceback.format_exc()))
        else:
            conn.send(("ok", result, series))


class LoadgenProcess:
    """A layout's load generator in a process of its own; `point` measures one load point there."""

    def __init__(
        self,
        spec: SweepSpec,
        clients: tuple[ClientConfig, ...],
        layout: Layout,
        scale: float,
        interval_s: float,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.layout = str(layout)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve, args=(child, spec, clients, layout, scale, interval_s),
            # daemon: ended with orch whatever happens; a sweep's load generator has no worker processes
            name=f"orch-loadgen-{layout}", daemon=True,
        )
        self._proc.start()
        child.close()
        self._stop_lock = threading.Lock()

    def point(
        self,
        point: LoadPoint,
        num_requests: int | None,
        k: int,
        cancelled: StopFlag,
        on_progress: Callable[[str, int, int | None], None] | None = None,
    ) -> tuple[PointResult, dict[str, Any]]:
        """The load point measured with workload seed + k (k: the try, pipeline/repeats.py);
        `on_progress(label, completed, total)` hears the worker's progress as it comes."""
        self._conn.send((point, num_requests, k))
        while True:
            while not self._conn.poll(POLL_S):
                if cancelled.is_set():
                    raise Cancelled
                if not self._proc.is_alive():
                    raise DeployError(
                        f"{self.layout}: its load generator process exited with code {self._proc.exitcode}"
                    )
            kind, *payload = self._conn.recv()
            if kind != "progress":
                break
            if on_progress is not None:
                on_progress(payload[0], payload[1], payload[2])
        if kind == "ok":
            return payload[0], payload[1]
        if kind == "failed":
            raise DeployError(f"{self.layout}: load point {point.label}: {payload[0]}")
        raise RuntimeError(f"{self.layout}: the load generator process failed:\n{payload[0]}")

    def stop(self) -> None:
        """Idempotent; from the layout's thread, or from the main thread when the wave is cancelled."""
        with self._stop_lock:
            self._stop()

    def _stop(self) -> None:
        if self._conn.closed:
            return
        with contextlib.suppress(OSError):  # the worker is gone already
            self._conn.send(None)
        self._proc.join(STOP_GRACE_S)
        if self._proc.is_alive():  # mid-point (Ctrl-C): its records are not wanted
            self._proc.terminate()
            self._proc.join(STOP_GRACE_S)
        self._conn.close()


class MainThreadCalls:
    """Calls from the layouts' threads run on the main thread, in `serve`, in the order they come."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            return fn(*args, **kwargs)
        done: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise Cancelled
            self._queue.put((functools.partial(fn, *args, **kwargs), done))
        return done.result()

    def serve(self, threads: Sequence[threading.Thread]) -> None:
        """Run what the threads ask for until every one of them has ended."""
        while any(t.is_alive() for t in threads) or not self._queue.empty():
            try:
                fn, done = self._queue.get(timeout=POLL_S / 4)
            except queue.Empty:
                continue
            try:
                done.set_result(fn())
            except Exception as exc:  # the caller's to handle (a StoreError ends its layout and the sweep)
                done.set_exception(exc)
            except BaseException:  # Ctrl-C on the main thread: the caller is cancelled, the wave stops
                done.set_exception(Cancelled())
                raise

    def close(self) -> None:
        """No more calls: pending and later ones raise Cancelled in their threads."""
        with self._lock:
            self._closed = True
        while True:
            try:
                _, done = self._queue.get_nowait()
            except queue.Empty:
                return
            done.set_exception(Cancelled())


class OnMainThread:
    """`target`'s methods, called through MainThreadCalls (a Store or an Observer for a layout's thread)."""

    def __init__(self, target: object, calls: MainThreadCalls) -> None:
        self._target, self._calls = target, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        return functools.partial(self._calls.call, attr)


T = TypeVar("T")


def on_main_thread(target: T, calls: MainThreadCalls) -> T:
    """`target` as a layout's thread uses it: the same methods, each run on the main thread."""
    return cast(T, OnMainThread(target, calls))


__all__ = [
    "Cancelled", "LoadgenProcess", "MainThreadCalls", "OnMainThread", "ProgressForward", "on_main_thread",
]
