"""The load of a sweep: the requests (token counts and their distributions), their arrival, and the
capacity search that picks the rates when the spec lists none.

Session workloads (`kind: conversation`, `kind: agentic`) send requests whose prompts grow turn by
turn: a load point's rate (or concurrency) counts sessions, and `num_requests` counts sessions too;
each turn is sent once the previous turn's answer came back (plus the think time)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orchestrator.spec.base import SpecModel
from orchestrator.spec.checks import MAX_COUNT, MAX_DURATION_S, MAX_RATE_PER_S, MAX_TOKENS


class TokenDistribution(SpecModel):
    """A distribution of token counts, sampled per request with the workload seed."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = Field(description="Distribution family.")
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean token count (uniform: midpoint).")
    stddev: float = Field(0.0, ge=0, le=MAX_TOKENS, description="Standard deviation (normal, lognormal).")
    min: int = Field(1, gt=0, le=MAX_TOKENS, description="Smallest count; samples are clipped to [min, max].")
    max: int | None = Field(
        None, gt=0, le=MAX_TOKENS, description="Largest count; uniform samples from [min, max]."
    )

    @model_validator(mode="after")
    def _bounds(self) -> TokenDistribution:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        if self.kind == "uniform" and self.max is None:
            raise ValueError("a uniform distribution needs 'max'")
        return self


TokenCount = Annotated[int, Field(gt=0, le=MAX_TOKENS)] | TokenDistribution


class SecondsDistribution(SpecModel):
    """A distribution of durations in seconds (think time, tool time), sampled per turn with the seed."""

    kind: Literal["fixed", "exponential", "uniform", "lognormal"] = Field(description="Distribution family.")
    mean_s: float = Field(ge=0, le=MAX_DURATION_S, description="Mean (uniform: midpoint) in seconds.")
    stddev_s: float = Field(0.0, ge=0, le=MAX_DURATION_S, description="lognormal: standard deviation.")
    min_s: float = Field(0.0, ge=0, le=MAX_DURATION_S, description="Samples are clipped to [min_s, max_s].")
    max_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, description="Largest; uniform: upper end.")

    @model_validator(mode="after")
    def _bounds(self) -> SecondsDistribution:
        if self.max_s is not None and self.max_s < self.min_s:
            raise ValueError(f"max_s ({self.max_s:g}) must be at least min_s ({self.min_s:g})")
        if self.kind == "uniform" and self.max_s is None:
            raise ValueError("a uniform distribution needs 'max_s'")
        if self.kind == "lognormal" and self.mean_s <= 0:
            raise ValueError("a lognormal distribution needs mean_s > 0")
        return self


Seconds = Annotated[float, Field(ge=0, le=MAX_DURATION_S)] | SecondsDistribution
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)] | TokenDistribution
# A session's turns (rounds) and a round's parallel sub-calls are drawn per session up front: ten million
# of them would hang the workload's construction (and no model's context holds that many turns).
MAX_TURNS = 10_000
MAX_PARALLEL_CALLS = 1_024


def _check_count(name: str, value: int | TokenDistribution, bound: int) -> None:
    """Refuse a count (or a distribution's max, else its mean) above `bound`."""
    if isinstance(value, int):
        top: float = value
    else:
        top = value.max if value.max is not None else value.mean
    if top > bound:
        raise ValueError(f"{name}: {top:,.0f} is more than {bound:,}; give at most {bound:,}")


class ConversationSpec(SpecModel):
    """kind: conversation: sessions of turns; each turn's prompt is the whole history (every earlier
    prompt and answer, byte for byte) plus `input_tokens` of new user text; `output_tokens` per answer."""

    turns: Count = Field(4, description="Turns per session: a number or a distribution.")
    first_input_tokens: TokenCount | None = Field(
        None, description="New user tokens of a session's first turn (a pasted document, say); default: "
        "input_tokens, as every later turn.",
    )
    system_prompt_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="Tokens of a system prompt every session starts with (0: none)."
    )
    think_time_s: Seconds = Field(
        0.0, description="Time between an answer and the next turn: seconds or a distribution."
    )

    @model_validator(mode="after")
    def _bounded(self) -> ConversationSpec:
        _check_count("turns", self.turns, MAX_TURNS)
        return self


class AgenticSpec(SpecModel):
    """kind: agentic: sessions of tool rounds over a system prompt and tool definitions shared by every
    session. A session's first round sends the task (`input_tokens`); each later round sends the tool
    results of the round before (`tool_output_tokens` each); every round but the last answers with a
    tool call (`tool_call_tokens`), the last with `output_tokens`. A round may fan out into parallel
    sub-calls on the same history, which join before the next round."""

    system_prompt_tokens: int = Field(1000, ge=0, le=MAX_TOKENS, description="Shared system prompt tokens.")
    tool_definitions_tokens: int = Field(
        2000, ge=0, le=MAX_TOKENS, description="Shared tool definitions tokens (after the system prompt)."
    )
    rounds: Count = Field(4, description="Model calls per session in sequence (rounds).")
    tool_output_tokens: TokenCount = Field(200, description="Tokens of each tool result sent back.")
    tool_call_tokens: TokenCount = Field(50, description="Output tokens of a tool-calling round.")
    parallel_calls: Count = Field(
        1, description="Sub-calls a round fans out into (1: none); they share the history and join."
    )
    tool_time_s: Seconds = Field(0.5, description="Time the tools take between rounds.")

    @model_validator(mode="after")
    def _bounded(self) -> AgenticSpec:
        _check_count("rounds", self.rounds, MAX_TURNS)
        _check_count("parallel_calls", self.parallel_calls, MAX_PARALLEL_CALLS)
        return self


TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt", "orch"]


class SearchSpec(SpecModel):
    """How the sweep finds a layout's SLO capacity: bracket from a seed rate, then bisect."""

    tolerance_frac: float = Field(
        0.05, gt=0, lt=1, description="Stop when the bracket is narrower than this share of the capacity."
    )
    max_points: int = Field(12, ge=2, le=1000, description="Most load points measured per layout.")
    min_rate_per_s: float = Field(
        0.05, gt=0, le=MAX_RATE_PER_S, description="Lowest rate tried; failing here is capacity 0."
    )
    max_rate_per_s: float = Field(1000.0, gt=0, le=MAX_RATE_PER_S, description="Highest rate tried.")
    start_rate_per_s: float | None = Field(
        None, gt=0, le=MAX_RATE_PER_S,
        description="First rate tried; default: the simulator's or planner's prediction.",
    )
    # closed loop (workload.loop: closed): the search is over whole numbers of requests in flight
    min_concurrency: int = Field(
        1, ge=1, le=MAX_COUNT,
        description="loop: closed only: lowest concurrency tried; failing here is capacity 0.",
    )
    max_concurrency: int = Field(
        1024, ge=1, le=MAX_COUNT, description="loop: closed only: highest concurrency tried."
    )
    start_concurrency: int | None = Field(
        None, ge=1, le=MAX_COUNT,
        description="loop: closed only: first concurrency tried; default: the simulator's or planner's "
        "prediction.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> SearchSpec:
        _check_bounds("concurrency", self.min_concurrency, self.max_concurrency, self.start_concurrency)
        _check_bounds("rate_per_s", self.min_rate_per_s, self.max_rate_per_s, self.start_rate_per_s)
        return self


def _check_bounds(axis: str, lo: float, hi: float, start: float | None) -> None:
    """min_<axis> below max_<axis>, and start_<axis> (if set) within them; the same rule for both axes.
    Whole concurrencies print as written, rates in short float form."""

    def f(v: float) -> str:
        return str(v) if isinstance(v, int) else f"{v:g}"

    if lo >= hi:
        raise ValueError(f"min_{axis} ({f(lo)}) must be below max_{axis} ({f(hi)})")
    if start is not None and not lo <= start <= hi:
        raise ValueError(
            f"start_{axis} ({f(start)}) must lie within [min_{axis}, max_{axis}] = [{f(lo)}, {f(hi)}]"
        )


class WorkloadSpec(SpecModel):
    """The requests sent to each layout and how they arrive."""

    kind: Literal["random", "sharegpt", "prefix", "trace", "conversation", "agentic"] = Field(
        "random", description="random tokens, ShareGPT first turns, shared-prefix prompts, a trace, "
        "multi-turn conversations (with dataset_path: ShareGPT conversations, every turn), or agentic "
        "sessions of tool rounds.",
    )
    input_tokens: TokenCount = Field(
        1024, description="Prompt tokens: a number or a distribution (conversation: new user tokens per "
        "turn; agentic: the task).",
    )
    output_tokens: TokenCount = Field(
        256, description="Output tokens: a number or a distribution (conversation: per answer; agentic: the "
        "final answer).",
    )
    conversation: ConversationSpec | None = Field(
        None, description="kind: conversation: turns, shared system prompt, think time."
    )
    agentic: AgenticSpec | None = Field(
        None, description="kind: agentic: shared system prompt and tools, rounds, tool outputs, sub-calls."
    )
    trace_format: TraceFormat = Field(
        "auto", description="kind: trace: the file's format (mooncake, azure, burstgpt, orch), or auto: "
        "told apart by its fields.",
    )
    time_scale: float = Field(
        1.0, gt=0, le=1000, description="kind: trace: replay speed; 2 replays the trace twice as fast."
    )
    prefix_tokens: int | None = Field(
        None, gt=0, le=MAX_TOKENS, description="prefix only: tokens shared by prompts."
    )
    dataset_path: str | None = Field(
        None, description="Dataset or trace file (sharegpt, trace; conversation: a ShareGPT file replayed "
        "with all its turns)."
    )
    arrival: Literal["poisson", "gamma", "constant"] = Field("poisson", description="Arrival process.")
    burstiness: float = Field(
        1.0, ge=0.001, le=1000, description="gamma only: shape factor; 1 is Poisson, below 1 burstier."
    )
    loop: Literal["open", "closed"] = Field(
        "open",
        description="open: requests arrive at a rate (rates_per_s, or a search over rates); closed: a fixed "
        "number of requests in flight, the next sent as one ends (concurrency, or a search over it).",
    )
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_COUNT)]] | None = Field(
        None, min_length=1, max_length=1000,
        description="loop: closed only: requests in flight to measure each layout at; without them the sweep "
        "searches each layout's SLO capacity in concurrency (search.min/max_concurrency).",
    )
    rates_per_s: list[Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)]] | None = Field(
        None, min_length=1, max_length=1000,
        description="Request rates to measure each layout at, in requests per second; without them the "
        "sweep searches each layout's SLO capacity (see 'search').",
    )
    search: SearchSpec = Field(
        default_factory=lambda: SearchSpec(), description="The capacity search (used without rates_per_s)."
    )
    num_requests: int | None = Field(
        None, gt=0, le=MAX_COUNT, description="Requests per load point (conversation, agentic: sessions; "
        "trace: the first N of the trace)."
    )
    duration_s: float | None = Field(
        None, gt=0, le=MAX_DURATION_S, description="Length of each load point in seconds."
    )
    warmup_s: float = Field(
        0.0, ge=0, le=MAX_DURATION_S, description="Seconds at the start excluded from metrics."
    )
    seed: int = Field(0, ge=0, lt=2**63, description="Seed of prompts, lengths and arrival times.")
    max_concurrency: int | None = Field(None, gt=0, le=MAX_COUNT, description="Cap on requests in flight.")

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.kind in ("sharegpt", "trace") and self.dataset_path is None:
            raise ValueError(f"workload kind '{self.kind}' needs 'dataset_path'")
        self._own_sections()
        if self.num_requests is None and self.duration_s is None and self.kind != "trace":
            raise ValueError("give 'num_requests' or 'duration_s' (or both)")
        self._one_loop()
        if self.loop == "closed":
            return self  # no arrival times are drawn, and each load point lasts its duration or count
        if self.kind == "trace":
            if self.rates_per_s:  # one point at the trace's own timestamps: a rate would be ignored
                raise ValueError("a trace sets its own arrival times; drop rates_per_s "
                                 "(time_scale: 2 replays it twice as fast)")
            return self
        if self.num_requests is None and self.duration_s is not None:
            # Arrival times are drawn up front: rate x duration of them must fit in memory.
            # A capacity search may go up to its highest rate.
            highest = max(self.rates_per_s) if self.rates_per_s else self.search.max_rate_per_s
            expected = highest * self.duration_s
            if expected > MAX_COUNT:
                raise ValueError(
                    f"duration_s {self.duration_s:g} at {highest:g}/s is about {expected:.3g} "
                    f"requests per load point, more than {MAX_COUNT:,}; shorten it or set num_requests"
                )
        if self.warmup_s > 0:
            # The shortest load point: the highest rate sends num_requests soonest.
            lengths = [self.duration_s] if self.duration_s is not None else []
            if self.num_requests is not None and self.rates_per_s:
                # (A search's rates are not known yet; the grid's are.)
                lengths.append(self.num_requests / max(self.rates_per_s))
            shortest = min(lengths, default=float("inf"))
            if self.warmup_s >= shortest:
                raise ValueError(
                    f"warmup_s ({self.warmup_s:g}) must be shorter than each load point (the shortest lasts "
                    f"about {shortest:.3g} s); lower warmup_s or raise duration_s / num_requests"
                )
        return self

    def conversation_or_default(self) -> ConversationSpec:
        return self.conversation or ConversationSpec()

    def agentic_or_default(self) -> AgenticSpec:
        return self.agentic or AgenticSpec()

    def _own_sections(self) -> None:
        """Each kind's own section (its defaults when the kind is chosen without one)."""
        if self.conversation is not None and self.kind != "conversation":
            raise ValueError("'conversation' settings need kind: conversation")
        if self.agentic is not None and self.kind != "agentic":
            raise ValueError("'agentic' settings need kind: agentic")
        if self.kind != "trace" and (self.trace_format != "auto" or self.time_scale != 1.0):
            raise ValueError("trace_format and time_scale are for kind: trace")

    def _one_loop(self) -> None:
        """Each loop's own fields: a closed loop's load is its concurrency, an open loop's its rate."""
        # bounds changed from their defaults (a spec folded in again dumps every field, so "was it
        # given" is not "was it set")
        changed = {
            k for k, f in SearchSpec.model_fields.items() if getattr(self.search, k) != f.default
        }
        rate_fields = sorted(changed & {"min_rate_per_s", "max_rate_per_s", "start_rate_per_s"})
        conc_fields = sorted(changed & {"min_concurrency", "max_concurrency", "start_concurrency"})
        if self.loop == "closed":
            if self.rates_per_s is not None:
                raise ValueError(
                    "rates_per_s is an open-loop grid; with loop: closed give concurrency: [...]"
                )
            if self.max_concurrency is not None:
                raise ValueError(
                    "max_concurrency caps an open loop; a closed loop's concurrency is its load point "
                    "(concurrency: [...], or search.min_concurrency / max_concurrency)"
                )
            if rate_fields:
                raise ValueError(
                    f"search.{rate_fields[0]} bounds an open loop's rate; with loop: closed use "
                    "search.min_concurrency / max_concurrency / start_concurrency"
                )
        else:
            if self.concurrency is not None:
                raise ValueError(
                    "concurrency is a closed-loop grid (requests in flight); set loop: closed, or give "
                    "rates_per_s for an open loop"
                )
            if conc_fields:
                raise ValueError(
                    f"search.{conc_fields[0]} bounds a closed loop; set loop: closed, or use "
                    "search.min_rate_per_s / max_rate_per_s / start_rate_per_s"
                )
