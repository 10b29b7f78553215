"""The few OpenAI-compatible calls `orch consistency` makes, with vLLM's extensions for token ids and
prompt logprobs (checked against vLLM 0.32's server): greedy generation with top-k logprobs, and
teacher-forced scoring of a given continuation through `prompt_logprobs`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from orchestrator.consistency.estimators import TopK
from orchestrator.errors import OrchError

TIMEOUT_S = 300.0


class NoLogprobs(OrchError):
    """The engine answered without the logprobs or token ids consistency needs."""


@dataclass(frozen=True)
class Generation:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    topk: tuple[dict[int, float], ...]  # one per generated token


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            data: dict[str, Any] = json.load(resp)
            return data
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300].replace("\n", " ")
        raise OrchError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OrchError(f"{url}: {exc}") from None


def served_models(base_url: str) -> list[tuple[str, str]]:
    """(id, root) of each model the server lists; root is the weights path or repo vLLM loaded."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=30) as resp:
            data = json.load(resp)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OrchError(f"{base_url}/models: {exc}") from None
    return [(str(m.get("id")), str(m.get("root") or m.get("id"))) for m in data.get("data", [])]


def _token_id(key: str) -> int:
    if key.startswith("token_id:"):
        return int(key.split(":", 1)[1])
    return int(key)


def _choice(base_url: str, data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices") or []
    if not choices:
        raise OrchError(f"{base_url}: completion without choices: {str(data)[:200]}")
    choice: dict[str, Any] = choices[0]
    return choice


def generate(base_url: str, model: str, prompt: str | list[int], max_tokens: int, top_k: int) -> Generation:
    """Greedy (temperature 0) completion with the top-k logprobs of every generated token."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": top_k,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "stream": False,
    }
    choice = _choice(base_url, _post(f"{base_url}/completions", body))
    lp = choice.get("logprobs") or {}
    top = lp.get("top_logprobs")
    ids = choice.get("token_ids")
    prompt_ids = choice.get("prompt_token_ids")
    if not top or ids is None or prompt_ids is None:
        raise NoLogprobs(
            f"{base_url}: the engine returned no top-k logprobs or token ids for a completion; orch "
            "consistency needs logprobs and token ids (vLLM's completions API has both)"
        )
    try:
        topk = tuple({_token_id(k): float(v) for k, v in (pos or {}).items()} for pos in top)
    except ValueError:
        raise NoLogprobs(f"{base_url}: top-k logprobs are not keyed by token id") from None
    return Generation(tuple(int(x) for x in prompt_ids), tuple(int(x) for x in ids), topk)


def score(
    base_url: str, model: str, prompt_ids: list[int], continuation: list[int], top_k: int
) -> list[TopK]:
    """Teacher-forced top-k logprobs at each position of `continuation` after `prompt_ids` (from
    `prompt_logprobs`: one forward pass over prompt + continuation)."""
    if not continuation:
        return []
    body = {
        "model": model,
        "prompt": [*prompt_ids, *continuation],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": top_k,
        "return_token_ids": True,
        "stream": False,
    }
    choice = _choice(base_url, _post(f"{base_url}/completions", body))
    plp = choice.get("prompt_logprobs")
    if not plp:
        raise NoLogprobs(f"{base_url}: the engine returned no prompt_logprobs (teacher-forced scoring)")
    tail = plp[len(prompt_ids) :]
    if len(tail) != len(continuation):
        raise OrchError(f"{base_url}: prompt_logprobs cover {len(tail)} of {len(continuation)} positions")
    out: list[TopK] = []
    for pos in tail:
        entries: dict[int, float] = {}
        for key, val in (pos or {}).items():
            entries[_token_id(str(key))] = float(val["logprob"] if isinstance(val, dict) else val)
        out.append(entries)
    return out
