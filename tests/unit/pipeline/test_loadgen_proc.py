"""The side-by-side sweep's plumbing: calls from the layouts' threads run on the main thread (where
the store's sqlite connection lives), errors go back to the caller, and a closed wave cancels them."""

from __future__ import annotations

import sqlite3
import threading

from orchestrator.pipeline.loadgen_proc import Cancelled, MainThreadCalls, OnMainThread


class _Db:
    """Like the store: an sqlite3 connection, usable only on the thread that made it."""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE TABLE t (layout TEXT)")
        self.path = "mem"

    def add(self, layout: str) -> int:
        self.conn.execute("INSERT INTO t VALUES (?)", (layout,))
        return int(self.conn.execute("SELECT count(*) FROM t").fetchone()[0])

    def fail(self) -> None:
        raise ValueError("store says no")


def test_threads_write_through_the_main_thread_and_get_its_errors() -> None:
    db, calls = _Db(), MainThreadCalls()
    proxy = OnMainThread(db, calls)
    seen: dict[str, object] = {}

    def layout(name: str) -> None:
        seen[name] = proxy.add(name)
        try:
            proxy.fail()
        except ValueError as exc:
            seen[name + " error"] = str(exc)
        seen[name + " path"] = proxy.path

    threads = [threading.Thread(target=layout, args=(n,)) for n in ("tp8", "tp4x2")]
    for t in threads:
        t.start()
    calls.serve(threads)
    assert sorted([seen["tp8"], seen["tp4x2"]]) == [1, 2]  # type: ignore[type-var]
    assert seen["tp8 error"] == seen["tp4x2 error"] == "store says no"
    assert seen["tp8 path"] == "mem"
    errors: list[BaseException] = []  # what the proxy saves the threads from: sqlite refuses them

    def direct() -> None:
        try:
            db.add("x")
        except sqlite3.ProgrammingError as exc:
            errors.append(exc)

    t = threading.Thread(target=direct)
    t.start()
    t.join()
    assert len(errors) == 1


def test_a_closed_wave_cancels_pending_and_later_calls() -> None:
    calls = MainThreadCalls()
    outcome: list[str] = []
    started = threading.Event()

    def layout() -> None:
        started.set()
        try:
            calls.call(lambda: outcome.append("ran"))
        except Cancelled:
            outcome.append("cancelled")
        try:
            calls.call(lambda: outcome.append("ran"))
        except Cancelled:
            outcome.append("cancelled")

    t = threading.Thread(target=layout)
    t.start()
    started.wait(10)
    # Nobody serves: the first call waits in the queue until the wave is closed.
    while calls._queue.empty() and t.is_alive():
        t.join(0.01)
    calls.close()
    t.join(10)
    assert outcome == ["cancelled", "cancelled"]
    assert calls.call(lambda: 7) == 7  # the main thread itself calls directly


def test_the_worker_forwards_per_request_progress_and_point_hands_it_on() -> None:
    import multiprocessing

    from orchestrator.pipeline.loadgen_proc import LoadgenProcess, ProgressForward

    parent, child = multiprocessing.Pipe()
    fwd = ProgressForward(child)
    fwd.begin("rate=2/s", 3)
    for _ in range(3):
        fwd.append(None)  # type: ignore[arg-type]  # the record itself is not sent, only the count
    child.send(("ok", "the result", {"series": 1}))

    class _Alive:
        def is_alive(self) -> bool:
            return True

    # The parent's side of a LoadgenProcess, on the pipe above (no process needed to read it).
    proc = object.__new__(LoadgenProcess)
    proc.layout, proc._conn, proc._proc = "tp8", parent, _Alive()  # type: ignore[assignment]
    heard: list[tuple[str, int, int | None]] = []
    sent: list[object] = []
    proc._conn = parent
    real_send = parent.send
    parent.send = lambda msg: sent.append(msg)  # type: ignore[method-assign]
    result = proc.point("P", 3, 0, threading.Event(),  # type: ignore[arg-type]  # "P": any point will do
                        lambda label, done, total: heard.append((label, done, total)))
    parent.send = real_send  # type: ignore[method-assign]
    assert result == ("the result", {"series": 1})
    assert sent == [("P", 3, 0)]
    # begin (0 of 3), then throttled counts, always the last one: increasing, ending at 3 of 3.
    assert heard[0] == ("rate=2/s", 0, 3) and heard[-1] == ("rate=2/s", 3, 3)
    assert [d for _, d, _ in heard] == sorted(d for _, d, _ in heard)
