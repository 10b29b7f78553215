"""Prefill-only and decode-only engines: vLLM v1's scheduler (sim/engine.py) with a KV handover.

A prefill engine runs each request with max_tokens 1 (as vLLM's disaggregated proxy sends it), so the
request finishes in the step that completes its prompt; its KV then stays allocated (`handover_kv`) until
the decode side has pulled it, as vLLM's NIXL connector frees the prefill blocks only once the decode
engine reports the read (nixl/base_scheduler.py: `request_finished` delays the free, `_reqs_need_send`).

A decode engine first reserves KV for a request's whole prompt (vLLM allocates the blocks before the
load: a request waits in WAITING_FOR_REMOTE_KVS meanwhile), and only when the KV and a sequence slot are
free: a request waits for room. When the KV has arrived, the request joins as a prefill of its last
prompt token: vLLM's scheduler always computes at least one token to get logits, so the decode engine's
first step emits the first output token (nixl/pull_scheduler.py `get_num_new_matched_tokens` loads the
prompt; the scheduler recomputes what is left). Preempted later, it is recomputed locally, as vLLM does.
"""

from __future__ import annotations

from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.cost import LayoutCost
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineConfig, EngineCore, Seq


class PrefillCore(EngineCore):
    """Computes prompts; keeps each finished request's KV until its transfer ends."""

    def __init__(self, cost: LayoutCost, config: EngineConfig) -> None:
        super().__init__(cost, config)
        # Tokens of finished prompts not yet pulled by a decode engine. Not EngineCore.held_kv (the running
        # contexts in cached blocks, subtracted from the cache's count): sharing that name cancelled the
        # handover out of kv_used_tokens whenever prefix caching was on.
        self.handover_kv = 0

    def kv_used_tokens(self) -> float:
        return super().kv_used_tokens() + self.handover_kv

    def hold(self, tokens: int) -> None:
        self.handover_kv += tokens

    def release(self, tokens: int) -> None:
        self.handover_kv -= tokens

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """A prefill engine holds a prompt and the one token it samples."""
        return super().fits(prompt_tokens, 1)


class DecodeCore(EngineCore):
    """Decodes requests whose prompt KV arrives from a prefill engine."""

    def __init__(self, cost: LayoutCost, config: EngineConfig) -> None:
        super().__init__(cost, config)
        self.incoming_kv = 0  # tokens reserved for transfers under way
        self.incoming = 0  # requests whose transfer is under way

    def kv_used_tokens(self) -> float:
        return super().kv_used_tokens() + self.incoming_kv

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running) + self.incoming

    def has_room(self, prompt_tokens: int) -> bool:
        """Whether the KV of a `prompt_tokens` prompt (and half a block) and a sequence slot are free."""
        cfg = self.config
        if len(self.running) + self.incoming >= cfg.max_num_seqs and (self.running or self.incoming):
            return False
        return self.kv_used_tokens() + prompt_tokens + cfg.block_tokens // 2 <= cfg.kv_capacity_tokens

    def reserve(self, prompt_tokens: int) -> None:
        self.incoming_kv += prompt_tokens + self.config.block_tokens // 2
        self.incoming += 1

    def cancel_reservation(self, prompt_tokens: int) -> None:
        """A reserved request went away before its KV arrived (client gone, transfer failed)."""
        self.incoming_kv -= prompt_tokens + self.config.block_tokens // 2
        self.incoming -= 1

    def arrive(self, seq: Seq) -> None:
        """The prompt's KV is here: the request runs its last prompt token next step."""
        self.incoming_kv -= seq.prompt_tokens + self.config.block_tokens // 2
        self.incoming -= 1
        seq.prefill_target = seq.prompt_tokens
        seq.computed = max(seq.prompt_tokens - 1, 0)
        self.running[seq.request_id] = seq
        self.prefilling[seq.request_id] = seq
        self.prefill_kv += seq.computed


def pool_engines(inputs: PlanInputs, shape: Layout, role: str, replicas: int) -> list[EngineCore]:
    """Every engine of one pool (replicas x DP ranks): the engines of one replica as sim/build.py makes
    them (the planner's cost model and KV capacity, the pool's settings in inputs.settings), in their
    role."""
    try:
        base = replica_engines(inputs, shape)
    except SpecError as exc:
        raise SpecError(str(exc).replace(f"layout {shape}", f"{role} pool {shape}", 1)) from None
    kind = PrefillCore if role == "prefill" else DecodeCore
    return [kind(e.cost, e.config) for _ in range(replicas) for e in base]
