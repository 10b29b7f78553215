"""What one simulated engine is made of: its limits (`EngineConfig`), the requests inside it (`Seq`), and
the batch of one step (`StepPlan`). The scheduler that moves them is sim/engine.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.loadgen.content import Content
from orchestrator.plan.speculative_cost import SpeculativeCost
from orchestrator.sim.speculative import tokens_after


@dataclass(frozen=True)
class EngineConfig:
    """One simulated engine's limits: its KV capacity and the resolved settings (engines/settings.py)."""

    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_tokens: int  # paged-KV block size; on average half a block per sequence is allocated but empty
    reserve_whole_kv: bool = False  # TensorRT-LLM's GUARANTEED_NO_EVICT; vLLM v1 reserves nothing
    prefix_caching: bool = False  # reuse cached prefix blocks (sim/prefix_cache.py)
    # Hybrid models: a sequence's sliding-window/chunk/state blocks, in full-attention tokens, from its
    # whole length (KVCapacity.side_tokens). Charged at admission, freed with the sequence.
    side_kv_tokens: Callable[[int], int] | None = None
    speculative: SpeculativeCost | None = None


@dataclass
class Seq:
    """One request inside the engine. Token counts exclude nothing: `generated` counts emitted tokens."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    generated: int = 0  # tokens emitted, as of `decode_start_step` while decoding
    computed: int = 0  # prefill progress over `prefill_target`
    prefill_target: int = 0  # prompt (+ generated tokens when recomputing after preemption)
    decode_start_step: int = -1  # first step this sequence decodes in; -1 while prefilling/waiting
    segments: list[tuple[int, int]] = field(default_factory=list)  # (first, last) emitting steps
    preemptions: int = 0
    finished: bool = False
    content: Content | None = None  # the prompt's segments (+ the answer once queued); None: unshared
    hashes: Sequence[int] = ()  # block hashes of prompt + answer (prefix caching with content)
    reserved: int = 0  # reserve_whole_kv: the KV reserved at admission
    held: int = 0  # leading blocks this request holds in the prefix cache
    cached_tokens: int = 0  # prompt tokens its first admission found cached
    side_kv: int = 0  # window/state KV charged while running (EngineConfig.side_kv_tokens)
    rate: float = 1.0  # tokens per decode step on average (speculative decoding: above 1)
    phase: float = 0.0  # where in its burst pattern the sequence starts (sim/speculative.py)

    def generated_at(self, step: int) -> int:
        """Tokens emitted before `step` runs."""
        if self.decode_start_step < 0:
            return self.generated
        steps = step - self.decode_start_step
        if self.rate != 1.0:
            return min(self.generated + tokens_after(steps, self.rate, self.phase), self.max_tokens)
        return self.generated + steps


@dataclass(slots=True)
class StepPlan:  # not frozen: built once per engine step, and frozen dataclasses are slow to build
    index: int
    tokens: int  # new tokens computed (one per decode; speculation's drafts are priced apart)
    kv_tokens: float  # context tokens whose KV is read
    attn_pairs: float
    decodes: int
    prefill_chunks: tuple[tuple[Seq, int], ...]  # (sequence, tokens of its prompt computed now)
    sequences: int  # running sequences in this step
    # The part of attn_pairs that belongs to prefill chunks: MLA runs those in the cheaper
    # non-absorbed form and the step's decodes in the absorbed one (LayoutCost._stage).
    prefill_pairs: float = 0.0
    prefix_tokens: int = 0  # prompt tokens computed before this step's chunks (MLA re-expands them)
