"""`orch sim serve` by hand: --help lists the server's own flags, bad flags are one line with exit code 2
(a --gpu-override without '=' was a traceback), and the server says where it listens once it does."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.support.cli import ORCH, Orch


def test_help_lists_the_server_flags(orch: Orch) -> None:
    out = orch("sim", "serve", "--help")
    assert out.returncode == 0, out.stderr
    for flag in ("--model", "--layout", "--gpu", "--port", "--time-scale", "--gpu-override"):
        assert flag in out.stdout, flag


@pytest.mark.parametrize(("flags", "needle"), [
    (["--gpu-override", "hbm_efficiency"], "--gpu-override 'hbm_efficiency': expected FIELD=NUMBER"),
    (["--gpu-override", "hbm_efficiency=fast"], "expected FIELD=NUMBER"),
    (["--gpu-override", "=0.5"], "expected FIELD=NUMBER"),
    (["--gpu-override", "nosuch=1"], "unknown key 'nosuch'"),
    (["--layout", "tp4x2"], "one server is one replica; start 2 servers"),
    (["--time-scale", "0"], "--time-scale must be > 0"),
    (["--model", "nosuch"], "unknown model 'nosuch'"),
])
def test_bad_flags_are_one_line_exit_2(flags: list[str], needle: str, orch: Orch, free_port: int) -> None:
    base = {"--model": "qwen2.5-7b", "--layout": "tp4", "--gpu": "h100-sxm", "--port": str(free_port)}
    args = [x for k, v in base.items() if k not in flags for x in (k, v)]
    out = orch("sim", "serve", *args, *flags)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert needle in line, line
    assert "Traceback" not in out.stderr


def test_it_says_where_it_listens_and_answers_there(free_port: int) -> None:
    port = free_port
    proc = subprocess.Popen([*ORCH, "sim", "serve", "--model", "qwen2.5-7b", "--layout", "tp2",
                             "--gpu", "h100-sxm", "--port", str(port), "--time-scale", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # blocks until the port is bound (or the process ends)
        assert f"OpenAI API at http://127.0.0.1:{port}/v1" in line, line
        assert "qwen2.5-7b tp2" in line
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
                    models = json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert [m["id"] for m in models["data"]] == ["qwen2.5-7b"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _serve_args(port: str) -> list[str]:
    return ["sim", "serve", "--model", "qwen2.5-7b", "--layout", "tp1", "--gpu", "h100-sxm", "--port", port]


@pytest.mark.parametrize("port", ["70000", "0", "-1", "http"])
def test_a_port_out_of_range_is_one_line(port: str, orch: Orch) -> None:
    out = orch(*_serve_args(port))
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: argument --port:") and "see orch sim serve --help" in line, line


def test_a_taken_port_is_one_line(orch: Orch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = orch(*_serve_args(str(port)))
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in line, line


def test_overload_logs_a_count_not_a_traceback_per_refused_connection(free_port: int) -> None:
    # With 40 descriptors the server cannot accept most of 300 connections: asyncio then reports every
    # failed accept with a traceback (53 MB in two minutes). Here: one line and a count.
    import resource

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    port = free_port
    proc = subprocess.Popen([*ORCH, *_serve_args(str(port))], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=few_files)
    socks: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        assert "OpenAI API at" in proc.stderr.readline()
        for _ in range(300):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        time.sleep(3)  # the accept loop fails for each one it cannot take
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[:2000]
    lines = err.strip().splitlines()
    assert any("Too many open files" in line for line in lines), err
    assert len(lines) < 10, err  # one line per kind, one count per window; never one per connection
    assert any("more like 'socket.accept() out of system resource'" in line for line in lines), err
