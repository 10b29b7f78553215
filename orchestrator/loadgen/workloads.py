"""Workloads: the requests of a load point, as RequestSpecs (plus arrival offsets for a trace).

Kinds: `random` (input/output lengths from a distribution), `sharegpt` (a ShareGPT JSON file), `prefix`
(one or more shared prefixes plus unique suffixes, for prefix caching) and `trace` (JSONL, one request
a line: `{"arrival_s": 0.12, "input_tokens": 512, "output_tokens": 128}`).

Prompt text: with a local Hugging Face tokenizer directory, prompts are built from token ids and hold
exactly the asked number of tokens (RequestSpec.prompt_tokens is set). Without one, prompts are
deterministic text of common English words, roughly one token per word in BPE vocabularies; the true
count then comes from the server's `usage` (prompt_tokens stays None).

Lengths follow spec.models.TokenDistribution, seeded: fixed (round(mean)), uniform (integers in
[min, max]), normal (mean, stddev), lognormal (mean and stddev of the lengths themselves, not of their
logarithm); samples are rounded and clipped to [min, max].
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import ValidationError

from orchestrator.errors import SpecError
from orchestrator.loadgen.client import RequestSpec
from orchestrator.spec.workload import TokenDistribution

WorkloadKind = Literal["random", "sharegpt", "prefix", "trace"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = ("random", "sharegpt", "prefix", "trace")
Length = int | TokenDistribution

# Short, common words: one token each (with their leading space) in GPT-2/Llama/Qwen-style BPEs.
_WORDS_TEXT = (
    "the of and to in is it you that he was for on are as with his they at be this have from or one "
    "had by word but not what all were we when your can said there use an each which she do how their "
    "if will up other about out many then them these so some her would make like him into time has "
    "look two more write go see number no way could people my than first water been call who oil its "
    "now find long down day did get come made may part over new sound take only little work know place "
    "year live me back give most very after thing our just name good sentence man think say great where "
    "help through much before line right too mean old any same tell boy follow came want show also "
    "around form three small set put end does another well large must big even such because turn here"
)
_WORDS = tuple(_WORDS_TEXT.split())


class Tokenizer(Protocol):
    """What a workload needs from a tokenizer (a transformers tokenizer satisfies it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind
    specs: tuple[RequestSpec, ...]
    offsets_s: tuple[float, ...] | None = None  # trace only: arrival offsets from the first request
    token_counts: Literal["tokenizer", "server"] = "server"  # where the prompt token counts come from
    # text=False (the simulator in virtual time): (prompt tokens, output tokens) per request instead of
    # specs; request i is "req-{i}". 100,000 specs that only carry two counts cost more than the counts.
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A local Hugging Face tokenizer directory; transformers is imported only here."""
    p = Path(path)
    if not p.is_dir():
        raise SpecError(f"--tokenizer: {str(p)!r} is not a directory; give a local tokenizer directory")
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SpecError(
            "--tokenizer needs the 'transformers' package (pip install transformers); "
            "or omit --tokenizer and take token counts from the server's usage"
        ) from None
    tok: Tokenizer = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    return tok


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


def _words(n: int, rng: np.random.Generator) -> str:
    idx = rng.integers(0, len(_WORDS), n)
    return " ".join(_WORDS[i] for i in idx)


class _PromptMaker:
    """Deterministic prompts of about / exactly n tokens (with a tokenizer: exactly, re-encoded)."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tok = tokenizer
        self._ids: list[int] = []
        if tokenizer is not None:
            ids = tokenizer.encode(" " + " ".join(_WORDS), add_special_tokens=False)
            self._ids = list(dict.fromkeys(ids))

    def text(self, n: int, rng: np.random.Generator) -> tuple[str, int | None]:
        if self.tok is None:
            return _words(n, rng), None
        ids = [self._ids[i] for i in rng.integers(0, len(self._ids), n)]
        text = self.tok.decode(ids, skip_special_tokens=True)
        for _ in range(4):  # decode/encode may merge or split tokens: trim or pad until it is exact
            got = self.tok.encode(text, add_special_tokens=False)
            if len(got) == n:
                break
            if len(got) > n:
                got = got[:n]
            else:
                got = got + [self._ids[i] for i in rng.integers(0, len(self._ids), n - len(got))]
            text = self.tok.decode(got, skip_special_tokens=True)
        return text, len(self.tok.encode(text, add_special_tokens=False))

    def count(self, text: str) -> int | None:
        return None if self.tok is None else len(self.tok.encode(text, add_special_tokens=False))


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
    maker = _PromptMaker(tokenizer)
    specs = []
    for i in range(n):
        prompt, count = maker.text(ins[i], rng)
        specs.append(_spec(i, prompt, outs[i], count))
    return Workload("random", tuple(specs), None, "tokenizer" if tokenizer else "server")


def prefix_workload(n: int, prefix_len: int, input_len: Length, output_len: Length, *, num_prefixes: int = 1,
                    seed: int = 0, tokenizer: Tokenizer | None = None, text: bool = True) -> Workload:
    """Request i: prefix (i mod num_prefixes) of prefix_len tokens, then a unique suffix of input_len.
    text=False: as random_workload (the prefixes are still drawn first, so the lengths are the same)."""
    if prefix_len <= 0 or num_prefixes <= 0:
        raise SpecError("--prefix-len and --num-prefixes must be positive")
    rng = np.random.default_rng(seed)
    maker = _PromptMaker(tokenizer)
    prefixes = [maker.text(prefix_len, rng)[0] for _ in range(num_prefixes)]
    ins, outs = sample_lengths(input_len, n, rng), sample_lengths(output_len, n, rng)
    if not text:
        prompts = tuple(prefix_len + x for x in ins)  # the prefix, the "\n" and the suffix: words
        return Workload("prefix", (), lengths=(prompts, tuple(max(o, 1) for o in outs)))
    specs = []
    for i in range(n):
        suffix, _ = maker.text(ins[i], rng)
        prompt = prefixes[i % num_prefixes] + "\n" + suffix
        specs.append(_spec(i, prompt, outs[i], maker.count(prompt)))
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
    maker = _PromptMaker(tokenizer)
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


def trace_workload(path: str | Path, *, n: int | None = None, seed: int = 0,
                   tokenizer: Tokenizer | None = None, text: bool = True) -> Workload:
    """JSONL lines {"arrival_s", "input_tokens", "output_tokens"}; offsets are relative to the earliest.
    text=False: no prompt text (as random_workload)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SpecError(f"--dataset: cannot read {str(p)!r}: {exc.strerror}") from None
    rows: list[tuple[float, int, int]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            row = (float(obj["arrival_s"]), int(obj["input_tokens"]), int(obj["output_tokens"]))
        except (ValueError, KeyError, TypeError):
            raise SpecError(
                f"{p}:{lineno}: a trace line needs arrival_s, input_tokens and output_tokens "
                '(e.g. {"arrival_s": 0.5, "input_tokens": 512, "output_tokens": 128})'
            ) from None
        if not math.isfinite(row[0]):  # JSON parsers accept NaN and Infinity
            raise SpecError(f"{p}:{lineno}: arrival_s: {row[0]} is not a finite number; give seconds "
                            "from the trace's start, e.g. 0.5")
        if row[0] < 0 or row[1] <= 0 or row[2] <= 0:
            raise SpecError(f"{p}:{lineno}: arrival_s must be >= 0 and token counts > 0")
        rows.append(row)
    if not rows:
        raise SpecError(f"--dataset: {str(p)!r} holds no trace lines")
    rows.sort(key=lambda r: r[0])
    rows = rows[:n] if n is not None else rows
    t0 = rows[0][0]
    offsets = tuple(r[0] - t0 for r in rows)
    if not text:
        return Workload("trace", (), offsets, lengths=(tuple(r[1] for r in rows), tuple(r[2] for r in rows)))
    rng = np.random.default_rng(seed)
    maker = _PromptMaker(tokenizer)
    specs = []
    for i, (_, n_in, n_out) in enumerate(rows):
        prompt, count = maker.text(n_in, rng)
        specs.append(_spec(i, prompt, n_out, count))
    return Workload("trace", tuple(specs), offsets, "tokenizer" if tokenizer else "server")
