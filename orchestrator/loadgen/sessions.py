"""Session workloads: conversations and agentic sessions as plans, and a session's state as it runs.

A session is a sequence of steps; a step is one call (a conversation's turn, an agent's round) or
several parallel calls on the same history (sub-calls that join). Each call's prompt is the session's
history so far plus the call's own new text; once every call of a step has answered, the history
grows by each call's text and its answer, byte for byte as the engine saw them (the answer appended
right after the prompt it answered, so the engine's cached blocks of that answer are reused), and the
next step starts after the think (or tool) time. One state machine serves both runners: the load
generator over HTTP (loadgen/session_runner.py, with the answers the server returned) and the simulator
in virtual time (sim/sessions.py, with the answer text the simulated engine returns).

Plans are drawn from the workload seed. A session whose history would pass `max_model_len` is cut
there: the calls that would not fit (prompt plus answer longer than the model's context) and all later
steps are dropped, and the count of cut sessions and dropped calls is reported (`SessionSet`), not
sent to fail.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.errors import SpecError
from orchestrator.loadgen.content import Content, sim_answer_key, sim_answer_text, text_key
from orchestrator.loadgen.texts import PromptMaker
from orchestrator.loadgen.workloads import sample_lengths
from orchestrator.spec.workload import (
    AgenticSpec,
    ConversationSpec,
    Count,
    Seconds,
    SecondsDistribution,
    TokenDistribution,
)

Length = int | TokenDistribution


@dataclass(frozen=True)
class Segment:
    key: int
    tokens: int
    text: str | None = None  # None: the key's seeded words (loadgen/texts.py)


@dataclass(frozen=True)
class Call:
    user: Segment  # the call's own new text, after the history
    max_tokens: int


@dataclass(frozen=True)
class Step:
    calls: tuple[Call, ...]
    think_s: float = 0.0  # after the step's answers, before the next step


@dataclass(frozen=True)
class SessionPlan:
    session_id: str
    system: tuple[Segment, ...]  # shared by every session (system prompt, tool definitions)
    steps: tuple[Step, ...]

    @property
    def calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)


@dataclass(frozen=True)
class SessionSet:
    plans: tuple[SessionPlan, ...]
    cut_sessions: int = 0  # sessions cut short at max_model_len
    dropped_calls: int = 0  # calls not sent because they would not fit max_model_len
    max_model_len: int | None = None

    def note(self) -> str | None:
        """One line on the cuts, or None when nothing was cut."""
        if not self.cut_sessions:
            return None
        return (f"{self.cut_sessions} session(s) cut at max_model_len {self.max_model_len}: "
                f"{self.dropped_calls} call(s) not sent")


# -- sampling --------------------------------------------------------------------------------------
def sample_counts(count: Count | Length, n: int, rng: np.random.Generator) -> list[int]:
    """n whole numbers from a count or its distribution (the token-length families)."""
    return sample_lengths(count, n, rng)


def sample_seconds(value: Seconds, n: int, rng: np.random.Generator) -> list[float]:
    if not isinstance(value, SecondsDistribution):
        return [float(value)] * n
    d = value
    if d.kind == "fixed":
        raw = np.full(n, d.mean_s)
    elif d.kind == "exponential":
        raw = rng.exponential(d.mean_s, n) if d.mean_s > 0 else np.zeros(n)
    elif d.kind == "uniform":
        assert d.max_s is not None  # SecondsDistribution guarantees it
        raw = rng.uniform(d.min_s, d.max_s, n)
    else:
        sigma2 = math.log1p((d.stddev_s / d.mean_s) ** 2)
        raw = rng.lognormal(math.log(d.mean_s) - sigma2 / 2, math.sqrt(sigma2), n)
    hi = d.max_s if d.max_s is not None else math.inf
    return [float(min(max(x, d.min_s), hi)) for x in raw]


def _keys(rng: np.random.Generator, n: int) -> list[int]:
    return [int(k) for k in rng.integers(1, 1 << 62, n)]


class _Builder:
    """Steps of one session, cut where a call would not fit max_model_len."""

    def __init__(self, system_tokens: int, max_model_len: int | None) -> None:
        self.context, self.limit = system_tokens, max_model_len
        self.steps: list[Step] = []
        self.cut = False
        self.dropped = 0

    def add(self, calls: Sequence[Call], think_s: float) -> None:
        if self.cut:
            self.dropped += len(calls)
            return
        if self.limit is not None and any(
                self.context + c.user.tokens + c.max_tokens > self.limit for c in calls):
            self.cut, self.dropped = True, self.dropped + len(calls)
            return
        self.steps.append(Step(tuple(calls), think_s))
        self.context += sum(c.user.tokens + c.max_tokens for c in calls)


def _finish(plans: list[SessionPlan], builders: list[_Builder], ids: list[str], system: tuple[Segment, ...],
            limit: int | None) -> SessionSet:
    for sid, b in zip(ids, builders, strict=True):
        if b.steps:
            plans.append(SessionPlan(sid, system, tuple(b.steps)))
    return SessionSet(tuple(plans), sum(b.cut for b in builders), sum(b.dropped for b in builders), limit)


# -- generators ------------------------------------------------------------------------------------
def conversation_sessions(n: int, conv: ConversationSpec, input_len: Length, output_len: Length, *,
                          seed: int = 0, max_model_len: int | None = None) -> SessionSet:
    """n conversations: turns, new user tokens and answer tokens per turn, think time between turns."""
    rng = np.random.default_rng(seed)
    system_key = _keys(np.random.default_rng([seed, 1]), 1)[0]
    system = (Segment(system_key, conv.system_prompt_tokens),) if conv.system_prompt_tokens else ()
    turns = sample_counts(conv.turns, n, rng)
    builders, ids = [], []
    for s, k in enumerate(turns):
        users, outs = sample_counts(input_len, k, rng), sample_counts(output_len, k, rng)
        if conv.first_input_tokens is not None:
            users[0] = sample_counts(conv.first_input_tokens, 1, rng)[0]
        keys, thinks = _keys(rng, k), sample_seconds(conv.think_time_s, k, rng)
        b = _Builder(conv.system_prompt_tokens, max_model_len)
        for t in range(k):
            b.add([Call(Segment(keys[t], users[t]), outs[t])], thinks[t])
        builders.append(b)
        ids.append(f"s{s}")
    return _finish([], builders, ids, system, max_model_len)


def agentic_sessions(n: int, ag: AgenticSpec, input_len: Length, output_len: Length, *, seed: int = 0,
                     max_model_len: int | None = None) -> SessionSet:
    """n agent sessions: a task, tool rounds (each may fan out into parallel sub-calls), a final answer,
    over a system prompt and tool definitions every session shares."""
    shared_rng = np.random.default_rng([seed, 2])
    keys = _keys(shared_rng, 2)
    system = tuple(Segment(k, t) for k, t in zip(keys, (ag.system_prompt_tokens, ag.tool_definitions_tokens),
                                                strict=True) if t)
    rng = np.random.default_rng(seed)
    rounds = sample_counts(ag.rounds, n, rng)
    builders, ids = [], []
    for s, k in enumerate(rounds):
        b = _Builder(sum(x.tokens for x in system), max_model_len)
        fan = sample_counts(ag.parallel_calls, k, rng)
        tool_time = sample_seconds(ag.tool_time_s, k, rng)
        for r in range(k):
            width = 1 if r == 0 else fan[r]  # the task is one call; later rounds may fan out
            last = r == k - 1
            if r == 0:
                users = sample_counts(input_len, 1, rng)
            else:
                users = sample_counts(ag.tool_output_tokens, width, rng)
            outs = sample_counts(output_len if last else ag.tool_call_tokens, width, rng)
            keys = _keys(rng, width)
            calls = [Call(Segment(key, u), o) for key, u, o in zip(keys, users, outs, strict=True)]
            b.add(calls, tool_time[r])
        builders.append(b)
        ids.append(f"a{s}")
    return _finish([], builders, ids, system, max_model_len)


def sharegpt_sessions(path: str | Path, n: int, *, output_len: Length | None = None, seed: int = 0,
                      max_model_len: int | None = None, think_time_s: Seconds = 0.0) -> SessionSet:
    """ShareGPT conversations replayed with every turn: each human turn is a call, its answer as long as
    the reply in the file (about 4 characters a token) unless `output_len` is given. Conversations are
    shuffled with the seed and reused if n is larger; each use is its own session."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"dataset_path: cannot read {str(p)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError(f"dataset_path: {str(p)!r} is not valid JSON ({exc}); give a ShareGPT file") from None
    convs = [c for c in (_exchanges(e) for e in data) if c] if isinstance(data, list) else []
    if not convs:
        raise SpecError(f"dataset_path: {str(p)!r} has no ShareGPT conversations (a prompt and a reply)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(convs))
    builders, ids = [], []
    for s in range(n):
        conv = convs[int(order[s % len(convs)])]
        outs = (sample_counts(output_len, len(conv), rng) if output_len is not None
                else [max(1, round(len(reply) / 4)) for _, reply in conv])
        thinks = sample_seconds(think_time_s, len(conv), rng)
        b = _Builder(0, max_model_len)
        for t, (prompt, _) in enumerate(conv):
            b.add([Call(Segment(text_key(prompt), max(len(prompt.split()), 1), prompt), outs[t])], thinks[t])
        builders.append(b)
        ids.append(f"c{s}")
    return _finish([], builders, ids, (), max_model_len)


def _exchanges(entry: Any) -> list[tuple[str, str]]:
    """(human turn, reply) pairs of one ShareGPT conversation, in order, up to the first malformed one."""
    if not isinstance(entry, dict):
        return []
    conv = entry.get("conversations") or entry.get("conversation")
    if not isinstance(conv, list):
        return []
    out = []
    for i in range(0, len(conv) - 1, 2):
        a, b = conv[i], conv[i + 1]
        if not (isinstance(a, dict) and isinstance(b, dict)):
            break
        p, r = a.get("value"), b.get("value")
        if not (isinstance(p, str) and isinstance(r, str) and p.strip() and r):
            break
        out.append((p, r))
    return out


# -- a session as it runs --------------------------------------------------------------------------
def _after(content: Content | None, key: int, tokens: int) -> Content:
    return Content(None, key, tokens) if content is None else content.then(key, tokens)


@dataclass(frozen=True)
class PendingCall:
    """One call of the current step, ready to send."""

    request_id: str
    content: Content
    max_tokens: int
    tags: tuple[tuple[str, str], ...]
    prompt: str = ""  # completions: the whole prompt (empty in virtual time)
    messages: tuple[dict[str, str], ...] = ()  # chat: the whole conversation so far


@dataclass
class SessionState:
    """A session's history and its current step. `texts` None: virtual time (no prompt text)."""

    plan: SessionPlan
    texts: PromptMaker | None = None
    chat: bool = False
    step: int = 0
    content: Content | None = None
    text: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    _answers: dict[int, tuple[str | None, int]] = field(default_factory=dict)
    _user_texts: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for seg in self.plan.system:
            self.content = _after(self.content, seg.key, seg.tokens)
        if self.texts is not None and self.plan.system:
            system_text = "".join(self._text(s, i > 0) for i, s in enumerate(self.plan.system))
            self.text = system_text
            if self.chat:
                self.messages = [{"role": "system", "content": system_text}]

    @property
    def done(self) -> bool:
        return self.step >= len(self.plan.steps)

    def calls(self) -> list[PendingCall]:
        """The current step's calls."""
        step = self.plan.steps[self.step]
        sid, last = self.plan.session_id, self.step == len(self.plan.steps) - 1
        out = []
        for i, call in enumerate(step.calls):
            content = _after(self.content, call.user.key, call.user.tokens)
            tags: tuple[tuple[str, str], ...] = (("session", sid), ("turn", str(self.step)))
            if last:
                tags += (("session_end", "1"),)
            rid = f"{sid}-t{self.step}" + (f".{i}" if len(step.calls) > 1 else "")
            prompt = ""
            messages: tuple[dict[str, str], ...] = ()
            if self.texts is not None:
                user = self._user_texts.setdefault(i, self._text(call.user, bool(self.text)))
                if self.chat:
                    messages = (*self.messages, {"role": "user", "content": user})
                else:
                    prompt = self.text + user
            out.append(PendingCall(rid, content, call.max_tokens, tags, prompt, messages))
        return out

    def answered(self, index: int, text: str | None, tokens: int) -> None:
        """Call `index` of the current step answered `text` (None: the simulated engine's answer)."""
        self._answers[index] = (text, tokens)

    def advance(self) -> float | None:
        """The step is complete: the history takes each call and its answer; returns the think time
        before the next step, or None when the session is over."""
        step = self.plan.steps[self.step]
        for i, call in enumerate(step.calls):
            text, tokens = self._answers.get(i, (None, call.max_tokens))
            tokens = max(tokens, 1)
            key = text_key(text) if text is not None else sim_answer_key(tokens)
            self.content = _after(_after(self.content, call.user.key, call.user.tokens), key, tokens)
            if self.texts is not None:
                user = self._user_texts.get(i) or self._text(call.user, bool(self.text))
                answer = text if text is not None else sim_answer_text(tokens)
                if self.chat:
                    self.messages += [{"role": "user", "content": user},
                                      {"role": "assistant", "content": answer}]
                else:
                    # The answer right after the prompt it answered: the tokens the engine cached.
                    self.text += user + answer
        self._answers.clear()
        self._user_texts.clear()
        self.step += 1
        return None if self.done else step.think_s

    def _text(self, seg: Segment, after: bool) -> str:
        """A segment's text as it joins what is `after` it: seeded segments start with a space (a word
        boundary, so the tokens of a prompt are those of its segments in turn, as the content counts
        them); a dataset's text gets a line break."""
        assert self.texts is not None
        if seg.text is None:
            return self.texts.segment(seg.key, seg.tokens)
        return f"\n{seg.text}" if after and seg.text else seg.text
