"""The OpenAI wire format the simulated server speaks: SSE events, usage blocks, errors, and how
long a request's prompt is."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from orchestrator.loadgen.content import ROOT_HASH, sim_answer_text


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def token_text(n: int) -> str:
    return sim_answer_text(n)


# Chat templates add a few tokens per message (role markers); 4 is typical of Llama/Qwen templates.
_CHAT_TOKENS_PER_MESSAGE = 4


def prompt_tokens(body: dict[str, Any], chat: bool) -> list[str] | None:
    """The prompt as the simulated engine tokenizes it: token-id lists one token per id, text one token
    per word (the load generator's synthetic prompts are built that way), chat messages their words
    after four role-marker tokens each. None: no prompt in the body."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        out: list[str] = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            role = m.get("role") if isinstance(m, dict) else None
            text = content if isinstance(content, str) else json.dumps(content or "")
            out += ["<|start|>", str(role), "<|sep|>", "<|end|>"][:_CHAT_TOKENS_PER_MESSAGE]
            out += text.split()
        return out
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [str(t) for t in prompt]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split() or [""]
    return None


def count_prompt(body: dict[str, Any], chat: bool) -> int | None:
    """Prompt length in tokens (see prompt_tokens)."""
    tokens = prompt_tokens(body, chat)
    return None if tokens is None else max(len(tokens), 1)


def block_hashes(tokens: Sequence[str], block_tokens: int) -> list[int]:
    """vLLM's chained block hashes over the engine's tokens (here: words), full blocks only. Within one
    server process the hash of a tuple of strings is stable, which is all a cache needs."""
    out: list[int] = []
    parent = ROOT_HASH
    for i in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = hash((parent, tuple(tokens[i:i + block_tokens])))
        out.append(parent)
    return out


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "BadRequestError" if status == 400
                                        else "ServiceUnavailable", "code": status}}, status=status)
