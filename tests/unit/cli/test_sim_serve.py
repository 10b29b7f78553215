"""`orch sim serve` by hand: --help lists the server's own flags, bad flags are one line with exit code 2
(a --gpu-override without '=' was a traceback), and the server says where it listens once it does."""

from __future__ import annotations

import json
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
