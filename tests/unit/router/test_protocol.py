"""How the router splits a request between prefill and decode, per engine protocol."""

from __future__ import annotations

import pytest

from orchestrator.router.protocol import (
    VLLM_PREFILL_PARAMS,
    sglang_bodies,
    vllm_decode_body,
    vllm_prefill_body,
)
from orchestrator.router.server import Router, parse_args

BODY = {"model": "m", "prompt": "hello", "max_tokens": 64, "stream": True,
        "stream_options": {"include_usage": True}, "min_tokens": 4}


def test_vllm_prefill_body_as_its_proxy_sends_it() -> None:
    out = vllm_prefill_body(BODY)
    assert out["kv_transfer_params"] == VLLM_PREFILL_PARAMS
    assert out["kv_transfer_params"]["do_remote_decode"] is True
    assert out["max_tokens"] == 1 and out["stream"] is False
    assert "stream_options" not in out and "min_tokens" not in out
    assert BODY["max_tokens"] == 64 and BODY["stream"] is True  # the original is untouched
    chat = vllm_prefill_body({"messages": [], "max_completion_tokens": 9})
    assert chat["max_completion_tokens"] == 1


def test_vllm_decode_body_carries_what_prefill_answered() -> None:
    params = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": [1, 2]}
    out = vllm_decode_body(BODY, {"choices": [], "kv_transfer_params": params})
    assert out["kv_transfer_params"] == params and out["max_tokens"] == 64 and out["stream"] is True
    # A connector that finds the KV by the prompt (ExampleConnector) answers no parameters.
    assert "kv_transfer_params" not in vllm_decode_body(BODY, {"choices": []})


def test_sglang_bodies_share_one_room() -> None:
    p, d = sglang_bodies(BODY, "10.0.0.1", 8998)
    assert p["bootstrap_room"] == d["bootstrap_room"] and 0 <= p["bootstrap_room"] < 2**63
    assert p["bootstrap_host"] == "10.0.0.1" and d["bootstrap_port"] == 8998
    assert p["max_tokens"] == d["max_tokens"] == 64
    p2, _ = sglang_bodies(BODY, "h", 1)
    assert p2["bootstrap_room"] != p["bootstrap_room"]


def test_router_configuration_checks() -> None:
    with pytest.raises(ValueError, match="at least one prefill"):
        Router((), ("http://d",))
    with pytest.raises(ValueError, match="one bootstrap port per prefill"):
        Router(("http://p1", "http://p2"), ("http://d",), protocol="sglang", bootstrap_ports=(1,))
    assert Router(("http://p1",), ("http://d",), protocol="sglang").bootstrap_ports == (8998,)
    with pytest.raises(SystemExit):
        parse_args(["--prefill", "localhost:1", "--decode", "http://d:2", "--port", "3"])
