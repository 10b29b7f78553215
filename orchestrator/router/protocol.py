"""How a request is split between a prefill server and a decode server, per engine.

vLLM (0.33, the NIXL and other KV connectors; its toy proxy in tests/v1/kv_connector/nixl_integration
drives it the same way): first the prefill server, with `kv_transfer_params: {do_remote_decode: true}`,
max_tokens 1 and no streaming; its JSON answer carries `kv_transfer_params` naming where the KV waits;
then the decode server gets the original request plus those parameters and streams the answer.

SGLang (0.5.23 with its router's PD mode, `sglang_router.launch_router --pd-disaggregation`): both
servers get the same request at once, with `bootstrap_host`/`bootstrap_port` (the prefill server's KV
bootstrap server, --disaggregation-bootstrap-port, default 8998) and a random `bootstrap_room` that pairs
the two halves (srt/entrypoints/openai/protocol.py declares the three fields); the decode server streams.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Literal

Protocol = Literal["vllm", "sglang"]
PROTOCOLS: tuple[Protocol, ...] = ("vllm", "sglang")
SGLANG_BOOTSTRAP_PORT = 8998  # srt/arg_groups/fields/disagg.py disaggregation_bootstrap_port default

# What vLLM's proxy sends the prefill server: the KV is to be decoded elsewhere, nothing is known yet.
VLLM_PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
    "remote_block_ids": None, "remote_host": None, "remote_port": None,
}
# Fields a prefill-only request must not carry (vLLM's proxy drops them: "not supported for P").
_VLLM_PREFILL_DROP = ("stream_options", "min_tokens", "min_completion_tokens")


def vllm_prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in body.items() if k not in _VLLM_PREFILL_DROP}
    out["kv_transfer_params"] = dict(VLLM_PREFILL_PARAMS)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return out


def vllm_decode_body(body: dict[str, Any], prefill_answer: dict[str, Any]) -> dict[str, Any]:
    """The original request, with the KV parameters the prefill server answered (if any: a connector
    such as vLLM's ExampleConnector finds the KV by the prompt and returns none)."""
    out = dict(body)
    params = prefill_answer.get("kv_transfer_params")
    if isinstance(params, dict) and params:
        out["kv_transfer_params"] = params
    return out


def sglang_bodies(body: dict[str, Any], bootstrap_host: str, bootstrap_port: int,
                  room: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(prefill body, decode body): the same request, paired by one bootstrap room."""
    fields = {"bootstrap_host": bootstrap_host, "bootstrap_port": bootstrap_port,
              "bootstrap_room": room if room is not None else random.getrandbits(63)}
    return {**body, **fields}, {**body, **fields}
