"""The OpenAI wire format the simulated server speaks: SSE events, usage blocks, errors, and how
long a request's prompt is."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def token_text(n: int) -> str:
    return " tok" * n


# Chat templates add a few tokens per message (role markers); 4 is typical of Llama/Qwen templates.
_CHAT_TOKENS_PER_MESSAGE = 4


def count_prompt(body: dict[str, Any], chat: bool) -> int | None:
    """Prompt length in tokens: token-id lists count exactly, text counts one token per word (the
    load generator's synthetic prompts are built that way)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        total = 0
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            text = content if isinstance(content, str) else json.dumps(content or "")
            total += len(text.split()) + _CHAT_TOKENS_PER_MESSAGE
        return max(total, 1)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return max(len(prompt.split()), 1)
    return None


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "BadRequestError" if status == 400
                                        else "ServiceUnavailable", "code": status}}, status=status)
