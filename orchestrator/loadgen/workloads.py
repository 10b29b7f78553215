"""Workloads: the requests of a load point, as RequestSpecs (plus arrival offsets for a trace).

Kinds: `random` (input/output lengths from a distribution), `sharegpt` (a ShareGPT JSON file), `prefix`
(one or more shared prefixes plus unique suffixes, for prefix caching) and `trace` (orch's JSONL, one
request a line: `{"arrival_s": 0.12, "input_tokens": 512, "output_tokens": 128}`, or the field's formats:
Mooncake, Azure, BurstGPT; streamed by loadgen/traces.py). Session kinds (conversation, agentic) are
plans, not requests: loadgen/sessions.py.

Prompt text (loadgen/texts.py): with a local Hugging Face tokenizer directory, prompts are built from
token ids and hold exactly the asked number of tokens (RequestSpec.prompt_tokens is set). Without one,
prompts are deterministic text of common English words, roughly one token per word in BPE vocabularies;
the true count then comes from the server's `usage` (prompt_tokens stays None).

Lengths follow spec.models.TokenDistribution, seeded: fixed (round(mean)), uniform (integers in
[min, max]), normal (mean, stddev), lognormal (mean and stddev of the lengths themselves, not of their
logarithm); samples are rounded and clipped to [min, max].
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from pydantic import ValidationError

from orchestrator.errors import SpecError
from orchestrator.loadgen.client import RequestSpec
from orchestrator.loadgen.content import Content
from orchestrator.loadgen.texts import PromptMaker, Tokenizer
from orchestrator.loadgen.traces import TraceFormat
from orchestrator.loadgen.traces import trace_workload as read_trace_workload

if TYPE_CHECKING:
    from orchestrator.loadgen.sessions import SessionSet
from orchestrator.spec.workload import TokenDistribution

WorkloadKind = Literal["random", "sharegpt", "prefix", "trace", "conversation", "agentic"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = get_args(WorkloadKind)
Length = int | TokenDistribution

@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind
    specs: tuple[RequestSpec, ...]
    offsets_s: tuple[float, ...] | None = None  # trace only: arrival offsets from the first request
    token_counts: Literal["tokenizer", "server"] = "server"  # where the prompt token counts come from
    # text=False (the simulator in virtual time): (prompt tokens, output tokens) per request instead of
    # specs; request i is "req-{i}". 100,000 specs that only carry two counts cost more than the counts.
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    sessions: SessionSet | None = None  # conversation, agentic: sessions instead of requests (no specs)
    texts: PromptMaker | None = None  # sessions: how their segments read (None: words, no tokenizer)
    note: str | None = None  # what was left out of the file's requests, and why
    extra_body: dict[str, Any] | None = None  # sessions: added to every request's body


def parse_length(text: str, flag: str = "--input-len") -> Length:
    """'512' | 'uniform:128-1024' | 'normal:512,64' | 'lognormal:512,256[,MIN,MAX]' -> a Length."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+", s):
        n = int(s)
        if n <= 0:
            raise SpecError(f"{flag}: {text!r} must be a positive token count")
        return n
    kind, _, rest = s.partition(":")
    try:
        # uniform:MIN-MAX takes two whole numbers around one '-' (so 'uniform:-5-10' is not 5 to 10);
        # the others take comma-separated numbers, a sign kept for the bounds below to refuse.
        span = re.fullmatch(r"(\d+)-(\d+)", rest) if kind == "uniform" else None
        if kind == "uniform" and span is None:
            raise SpecError(f"{flag}: {text!r}: uniform takes MIN-MAX, two positive whole numbers, "
                            "e.g. uniform:128-1024")
        nums = [float(span[1]), float(span[2])] if span else (
            [float(x) for x in rest.split(",")] if kind in ("fixed", "normal", "lognormal") else [])
        if any(not math.isfinite(x) for x in nums):
            raise ValueError("every number must be finite")
        if kind == "fixed" and len(nums) == 1:
            return TokenDistribution(kind="fixed", mean=nums[0])
        if kind == "uniform" and len(nums) == 2:
            return TokenDistribution(kind="uniform", mean=(nums[0] + nums[1]) / 2, min=int(nums[0]),
                                     max=int(nums[1]))
        if kind in ("normal", "lognormal") and len(nums) in (2, 4):
            lo, hi = (int(nums[2]), int(nums[3])) if len(nums) == 4 else (1, None)
            return TokenDistribution(kind=kind, mean=nums[0], stddev=nums[1], min=lo, max=hi)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        detail = str(err["msg"]).removeprefix("Value error, ")
        raise SpecError(f"{flag}: {text!r}: {where + ': ' if where else ''}{detail}") from None
    except ValueError:
        raise SpecError(f"{flag}: {text!r}: give finite numbers, e.g. normal:512,64") from None
    raise SpecError(
        f"{flag}: {text!r} is not a length; use N, uniform:MIN-MAX, normal:MEAN,STD or lognormal:MEAN,STD"
    )


def sample_lengths(length: Length, n: int, rng: np.random.Generator) -> list[int]:
    """n token counts from `length` (see the module docstring for each family)."""
    if isinstance(length, int):
        return [length] * n
    d = length
    hi = d.max if d.max is not None else math.inf
    if d.kind == "fixed":
        raw = np.full(n, d.mean)
    elif d.kind == "uniform":
        assert d.max is not None  # TokenDistribution guarantees it
        raw = rng.integers(d.min, d.max + 1, n).astype(np.float64)
    elif d.kind == "normal":
        raw = rng.normal(d.mean, d.stddev, n)
    else:
        sigma2 = math.log1p((d.stddev / d.mean) ** 2)
        raw = rng.lognormal(math.log(d.mean) - sigma2 / 2, math.sqrt(sigma2), n)
    # Rounded half to even (as round()), then clipped to [min, max]: one array operation, not a loop.
    return np.clip(np.rint(raw), d.min, hi).astype(np.int64).tolist()  # type: ignore[no-any-return]


def _spec(i: int, prompt: str, max_tokens: int, prompt_tokens: int | None) -> RequestSpec:
    return RequestSpec(f"req-{i}", prompt, max(int(max_tokens), 1), prompt_tokens)


def random_workload(n: int, input_len: Length, output_len: Length, *, seed: int = 0,
                    tokenizer: Tokenizer | None = None, text: bool = True) -> Workload:
    """text=False: no prompt text, prompt_tokens set to the drawn length (the simulator in virtual
    time needs only counts; the lengths are the same draws either way, drawn before any text)."""
    rng = np.random.default_rng(seed)
    ins, outs = sample_lengths(input_len, n, rng), sample_lengths(output_len, n, rng)
    if not text:
        return Workload("random", (), lengths=(tuple(ins), tuple(max(o, 1) for o in outs)))
    maker = PromptMaker(tokenizer)
    specs = []
    for i in range(n):
        prompt, count = maker.text(ins[i], rng)
        specs.append(_spec(i, prompt, outs[i], count))
    return Workload("random", tuple(specs), None, "tokenizer" if tokenizer else "server")


def prefix_workload(n: int, prefix_len: int, input_len: Length, output_len: Length, *, num_prefixes: int = 1,
                    seed: int = 0, tokenizer: Tokenizer | None = None, text: bool = True) -> Workload:
    """Request i: prefix (i mod num_prefixes) of prefix_len tokens, then a unique suffix of input_len.
    text=False: specs without prompt text, their token counts and shared content set (the prefixes are
    still drawn first, so the lengths are the same)."""
    if prefix_len <= 0 or num_prefixes <= 0:
        raise SpecError("--prefix-len and --num-prefixes must be positive")
    rng = np.random.default_rng(seed)
    maker = PromptMaker(tokenizer)
    prefixes = [maker.text(prefix_len, rng)[0] for _ in range(num_prefixes)]
    # What the prompts share, for the simulator's prefix cache and prefix-aware routing: one node per
    # prefix (shared by its requests), then each request's own suffix.
    keys = [int(k) for k in np.random.default_rng([seed, 3]).integers(1, 1 << 62, num_prefixes + n)]
    nodes = [Content(None, keys[j], prefix_len) for j in range(num_prefixes)]
    ins, outs = sample_lengths(input_len, n, rng), sample_lengths(output_len, n, rng)
    if not text:  # specs without text (the prefix, the "\n" and the suffix: words), with what they share
        return Workload("prefix", tuple(
            RequestSpec(f"req-{i}", "", max(int(outs[i]), 1), prefix_len + ins[i],
                        content=nodes[i % num_prefixes].then(keys[num_prefixes + i], ins[i]))
            for i in range(n)))
    specs = []
    for i in range(n):
        suffix, _ = maker.text(ins[i], rng)
        prompt = prefixes[i % num_prefixes] + "\n" + suffix
        content = nodes[i % num_prefixes].then(keys[num_prefixes + i], ins[i])
        specs.append(RequestSpec(f"req-{i}", prompt, max(int(outs[i]), 1), maker.count(prompt),
                                 content=content))
    return Workload("prefix", tuple(specs), None, "tokenizer" if tokenizer else "server")


def _turns(entry: Any) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    conv = entry.get("conversations") or entry.get("conversation")
    if not isinstance(conv, list) or len(conv) < 2:
        return None
    first, second = conv[0], conv[1]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return None
    p, r = first.get("value"), second.get("value")
    return (p, r) if isinstance(p, str) and isinstance(r, str) and p and r else None


def sharegpt_workload(path: str | Path, n: int, *, output_len: Length | None = None, seed: int = 0,
                      tokenizer: Tokenizer | None = None) -> Workload:
    """First human turn as the prompt; output length from the reply (tokenized, else ~4 chars a token)
    unless `output_len` is given. Conversations are shuffled with the seed and reused if n is larger."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"--dataset: cannot read {str(p)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError(f"--dataset: {str(p)!r} is not valid JSON ({exc}); give a ShareGPT file") from None
    pairs = [t for t in (_turns(e) for e in data) if t is not None] if isinstance(data, list) else []
    if not pairs:
        raise SpecError(f"--dataset: {str(p)!r} has no ShareGPT conversations (a prompt and a reply)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pairs))
    maker = PromptMaker(tokenizer)
    outs = sample_lengths(output_len, n, rng) if output_len is not None else None
    specs = []
    for i in range(n):
        prompt, reply = pairs[int(order[i % len(pairs)])]
        if outs is not None:
            out = outs[i]
        else:
            counted = maker.count(reply)
            out = counted if counted is not None else max(1, round(len(reply) / 4))
        specs.append(_spec(i, prompt, out, maker.count(prompt)))
    return Workload("sharegpt", tuple(specs), None, "tokenizer" if tokenizer else "server")


def trace_workload(path: str | Path, *, n: int | None = None, duration_s: float | None = None,
                   fmt: TraceFormat = "auto", time_scale: float = 1.0, seed: int = 0,
                   tokenizer: Tokenizer | None = None) -> Workload:
    """A trace's first requests (at most n, arriving before duration_s) at its own arrival offsets,
    streamed (loadgen/traces.py: the formats, and what is refused)."""
    specs, offsets, read = read_trace_workload(path, n=n, duration_s=duration_s, fmt=fmt,
                                               time_scale=time_scale, seed=seed, tokenizer=tokenizer)
    return Workload("trace", specs, offsets, "tokenizer" if tokenizer else "server", note=read.note())
