"""A continuous-batching engine in the style of vLLM v1, stepped by the caller.

One `EngineCore` is one scheduler (one DP rank of one replica). Each step it schedules the running
requests first: every decode one token, every partial prefill its next chunk (prompts are chunked
only by the token budget, `max_num_batched_tokens`). A running request gets the KV for all of its
tokens or, when the cache cannot hold them, the most recently admitted request is preempted and
recomputed later (vLLM's recompute mode). Waiting requests are admitted in arrival order, within the
sequence cap (`max_num_seqs`), only in a step that preempted nothing and only when the cache holds
their whole first chunk. The step time comes from the planner's cost model for the batch formed.
With `reserve_whole_kv` (TensorRT-LLM's default capacity policy, GUARANTEED_NO_EVICT) a request is
admitted only when the KV for its whole prompt and every output token it may generate is free beside
what the running requests have reserved, so a running request never grows into a full cache and
nothing is preempted.
With speculative decoding (`EngineConfig.speculative`) each decode takes k+1 tokens of the budget and
of the KV cache during its step, the step is priced by the planner's `SpeculativeCost`, and a decoding
sequence emits `tokens_per_step` tokens per step on average, in bursts (sim/speculative.py).

With `prefix_caching` (vLLM's default), a request whose prompt has content (loadgen/content.py) reuses
the cached KV blocks of its prefix and computes only the rest; the block rules live in
sim/prefix_cache.py, and this module calls them at admission, after each prompt chunk, and when a
request ends or is preempted (its blocks stay cached for its recompute).

Bookkeeping is O(1) per decoding sequence per step on average: a decoding sequence's token count is
implied by the step counter, and finishes come off a heap, so 100k-request runs stay fast. Runs of
plain decode steps are applied in one loop by sim/decode_steps.py; the requests and step batches
(`Seq`, `StepPlan`) and the engine's limits (`EngineConfig`) are defined in sim/seq.py.
"""

from __future__ import annotations

import heapq
from collections import deque

from orchestrator.loadgen.content import sim_answer_key
from orchestrator.plan.cost import LayoutCost
from orchestrator.sim.prefix_cache import PrefixCache
from orchestrator.sim.seq import EngineConfig, Seq, StepPlan
from orchestrator.sim.speculative import phase_of, steps_to_emit

MIN_CACHE_BLOCK = 16  # the smallest block the prefix cache hashes (see EngineCore.__init__)


class EngineCore:
    def __init__(self, cost: LayoutCost, config: EngineConfig) -> None:
        self.cost = cost
        self.config = config
        self.waiting: deque[Seq] = deque()
        self.running: dict[str, Seq] = {}  # insertion order = admission order (LIFO preemption)
        self.prefilling: dict[str, Seq] = {}  # subset of running still computing its prompt
        self.decoding: dict[str, Seq] = {}
        self.finish_heap: list[tuple[int, int, str]] = []  # (last step, tiebreak, request id)
        self.step_index = 0
        # Sum of context tokens of decoding sequences (before this step); with speculation the
        # expected sum (rate per sequence per step), which is what the cost model prices.
        self.decode_ctx: float = 0
        self.prefill_kv = 0  # KV tokens allocated to prefilling sequences
        self.preemptions = 0
        self.reserved_kv = 0  # reserve_whole_kv: prompt + max output (+ half a block) per running request
        # The cache hashes blocks of at least MIN_CACHE_BLOCK tokens: a token-granular cache (SGLang's
        # radix tree, page size 1) is modelled as blocks of 16 with partial reuse, which hits to the
        # token as it does, without a hash per token.
        self.cache_block = max(config.block_tokens, MIN_CACHE_BLOCK)
        partial = config.reserve_whole_kv or self.cache_block > config.block_tokens
        self.cache = PrefixCache(self.cache_block, partial_reuse=partial) if config.prefix_caching else None
        self.held_kv = 0  # tokens of running requests' contexts in cached blocks (counted once, there)
        self.side_kv = 0  # window/state KV of the running sequences (hybrid models)
        self._tiebreak = 0
        spec = config.speculative
        self.spec = spec
        self.rate: float = spec.tokens_per_step if spec is not None else 1
        self.decode_tokens = spec.k + 1 if spec is not None else 1  # budget and KV slots of one decode
        self._admitted = 0

    # -- queue -------------------------------------------------------------------------------------
    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a request can ever run: its whole context must fit the KV cache alone."""
        return (prompt_tokens + max_tokens + self.config.block_tokens + self._side(prompt_tokens + max_tokens)
                <= self.config.kv_capacity_tokens)

    def _side(self, tokens: int) -> int:
        fn = self.config.side_kv_tokens
        return fn(tokens) if fn is not None else 0

    def add(self, seq: Seq) -> None:
        """Queue a request; callers reject the ones `fits` refuses (vLLM: longer than max_model_len)."""
        seq.prefill_target = seq.prompt_tokens + seq.generated
        if self.spec is not None:
            seq.rate, seq.phase = self.rate, phase_of(self._admitted)
            self._admitted += 1
        if self.cache is not None and seq.content is not None and not seq.hashes:
            # The answer's blocks are cached too: a later turn that quotes it reuses them.
            seq.content = seq.content.then(sim_answer_key(seq.max_tokens), seq.max_tokens)
            seq.hashes = seq.content.block_hashes(self.cache_block)
        self.waiting.append(seq)

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _reservation(self, seq: Seq) -> int:
        return seq.prompt_tokens + seq.max_tokens + self.config.block_tokens // 2

    def kv_used_tokens(self) -> float:
        used = (self.decode_ctx + self.prefill_kv + len(self.running) * self.config.block_tokens // 2
                + self.side_kv)
        cache = self.cache
        if cache is not None:  # cached blocks count once, whoever holds them (held: cached, not free)
            used += cache.held_blocks * self.cache_block - self.held_kv
        return used

    @property
    def kv_usage(self) -> float:
        return min(1.0, self.kv_used_tokens() / max(self.config.kv_capacity_tokens, 1))

    def _decode_ctx_of(self, seq: Seq, step: int) -> float:
        """What `decode_ctx` holds for a decoding `seq` before `step` runs."""
        return seq.prompt_tokens + seq.generated + (step - seq.decode_start_step) * self.rate

    def _steps_left(self, seq: Seq) -> int:
        """Decode steps until `seq`, decoding from now, has all its tokens."""
        left = seq.max_tokens - seq.generated
        return left if self.spec is None else steps_to_emit(left, seq.rate, seq.phase)

    def tokens_in_step(self, seq: Seq, step: int) -> int:
        """Tokens a decoding `seq` emits in `step` (1 without speculation)."""
        return seq.generated_at(step + 1) - seq.generated_at(step)

    # -- scheduling --------------------------------------------------------------------------------
    def _preempt_last(self) -> None:
        rid, seq = self.running.popitem()
        step = self.step_index
        self.side_kv -= seq.side_kv
        self.reserved_kv -= seq.reserved
        seq.reserved = 0
        if rid in self.decoding:
            del self.decoding[rid]
            self.decode_ctx -= self._decode_ctx_of(seq, step)
            seq.generated = seq.generated_at(step)
            if seq.segments and seq.segments[-1][1] == -1:
                seq.segments[-1] = (seq.segments[-1][0], step - 1)
            seq.decode_start_step = -1
            self._release(seq, seq.prompt_tokens + seq.generated - 1)  # the last token's KV is not written
        else:
            self.prefilling.pop(rid, None)
            self.prefill_kv -= seq.computed
            self._release(seq, seq.computed)
        seq.computed = 0
        seq.prefill_target = seq.prompt_tokens + seq.generated
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self) -> StepPlan:
        """The next step's batch (vLLM v1's rules, see `_schedule_once`)."""
        plan = self._schedule_once()
        if plan.tokens == 0 and self.waiting:
            # Preemption emptied the running set: vLLM's step would be empty and the next one admits;
            # an empty step takes no time, so admit at once instead of recording it.
            plan = self._schedule_once()
        return plan

    def _schedule_once(self) -> StepPlan:
        """Running requests first, then waiting ones, as vLLM v1's scheduler.

        Every running request is scheduled in full or not at all: a decode needs room for one more
        token, a partial prefill for its whole next chunk (as large as the token budget allows).
        While the cache cannot hold that, the newest running request is preempted (recompute).
        Waiting requests are admitted in arrival order only in a step that preempted nothing, and
        only when the cache holds their whole first chunk; the first one that does not fit stops
        admission (no chunk is shrunk to squeeze into the free KV).
        """
        cfg = self.config
        capacity = cfg.kv_capacity_tokens
        half_block = cfg.block_tokens // 2
        preempted = False
        while True:
            decodes = len(self.decoding)
            budget = cfg.max_num_batched_tokens - decodes * self.decode_tokens
            chunks: list[tuple[Seq, int]] = []
            chunked = 0  # tokens of the chunks (an integer sum: in any order)
            for seq in self.prefilling.values():
                if budget <= 0:
                    break
                chunk = min(seq.prefill_target - seq.computed, budget)
                chunks.append((seq, chunk))
                chunked += chunk
                budget -= chunk
            used = self.kv_used_tokens() + decodes * self.decode_tokens + chunked
            if used <= capacity or not self.running:
                break
            self._preempt_last()
            preempted = True
        kv_tokens = self.decode_ctx
        pairs = float(self.decode_ctx + decodes)  # each decode attends to its context and itself
        cache = self.cache
        if not chunks and (preempted or not self.waiting or len(self.running) >= cfg.max_num_seqs):
            # Pure decode step, the common case: nothing to admit or continue.
            if cache is not None:
                cache.trim_later(int((capacity - used) // self.cache_block))
            return StepPlan(self.step_index, decodes, kv_tokens, pairs, decodes, (), len(self.running))
        side_fn = cfg.side_kv_tokens
        while (not preempted and self.waiting and budget > 0
               and len(self.running) < cfg.max_num_seqs):
            seq = self.waiting[0]
            # Only a request with content can hit (a random prompt shares nothing)
            shared, hit, taken = self._lookup(seq) if cache is not None and seq.hashes else (0, 0, 0)
            chunk = min(seq.prefill_target - hit, budget)
            side = side_fn(seq.prompt_tokens + seq.max_tokens) if side_fn is not None else 0
            if used + taken + chunk + half_block + side > capacity:
                break
            if cfg.reserve_whole_kv:
                # What the request adds: blocks it shares are in memory already.
                reservation = self._reservation(seq) - shared
                if self.reserved_kv + reservation > capacity:
                    break
                seq.reserved = reservation
                self.reserved_kv += reservation
            self.waiting.popleft()
            self.running[seq.request_id] = seq
            self.prefilling[seq.request_id] = seq
            if cache is not None:
                if seq.hashes:
                    self._take(seq, shared, hit)
                else:  # the lookup counted, a miss (nothing else of _take applies)
                    cache.record(seq.prefill_target, 0, seq.preemptions > 0)
            seq.side_kv = side
            self.side_kv += side
            chunks.append((seq, chunk))
            chunked += chunk
            budget -= chunk
            used += taken + chunk + half_block + side
        if cache is not None:
            cache.trim_later(int((capacity - used) // self.cache_block))
        prefill_pairs = 0.0
        prefix = 0
        for seq, chunk in chunks:
            prefix += seq.computed
            prefill_pairs += chunk * (seq.computed + (chunk + 1) / 2)
        tokens = decodes + chunked
        return StepPlan(self.step_index, tokens, kv_tokens + prefix, pairs + prefill_pairs, decodes,
                        tuple(chunks), len(self.running), prefill_pairs, prefix)

    def next_decode(self, plan: StepPlan) -> StepPlan | None:
        """`complete(plan)` then `schedule()`, when both steps are plain decodes: `plan` computes no
        prompt and ends no request, and the next step has nothing to continue or admit and preempts
        nothing. Most steps of a busy engine are such steps; this applies them with the same result
        and without the general bookkeeping. None (nothing applied) when the general path is needed."""
        step = plan.index
        decodes = plan.decodes
        heap = self.finish_heap
        if plan.prefill_chunks or self.prefilling or not decodes or (heap and heap[0][0] <= step):
            return None
        cfg = self.config
        if self.waiting and len(self.running) < cfg.max_num_seqs:
            return None
        # As complete() and schedule() count them: with speculation a decode grows its context by
        # `rate` tokens per step on average and takes k+1 KV slots during the step.
        grown = decodes * self.rate
        self.decode_ctx += grown
        used = self.kv_used_tokens() + decodes * self.decode_tokens
        capacity = cfg.kv_capacity_tokens
        if used > capacity:  # the next step preempts: undone, the general path does it
            self.decode_ctx -= grown
            return None
        self.step_index = step + 1
        cache = self.cache
        if cache is not None:
            cache.trim_later(int((capacity - used) // self.cache_block))
        ctx = self.decode_ctx
        return StepPlan(step + 1, decodes, ctx, float(ctx + decodes), decodes, (), len(self.running))

    def step_time_s(self, plan: StepPlan) -> float:
        """Cost-model time of the step (PP micro-batches included: `LayoutCost.round_s`)."""
        if plan.tokens == 0:
            return 0.0
        if self.spec is not None:
            return self.spec.round_s(plan.tokens, plan.kv_tokens, plan.attn_pairs, plan.sequences,
                                     decodes=plan.decodes, prefill_pairs=plan.prefill_pairs,
                                     prefix_tokens=plan.prefix_tokens)
        if plan.sequences == plan.decodes == plan.tokens:  # a plain decode step: its batch size's pricer
            price = self.cost.decode_pricer(plan.decodes)
            if price is not None:
                return price(plan.kv_tokens, plan.attn_pairs)
        return self.cost.round_s(plan.tokens, plan.kv_tokens, plan.attn_pairs, plan.sequences,
                                 prefill_pairs=plan.prefill_pairs, prefix_tokens=plan.prefix_tokens)

    @property
    def request_overhead_s(self) -> float:
        """Time a request spends in front of this engine (HTTP, tokenisation) before it can be queued."""
        return self.cost.request_overhead_s

    def complete(self, plan: StepPlan) -> tuple[list[Seq], list[Seq]]:
        """Apply a step: (sequences that emitted their first token after a prefill, finished ones).

        Every decoding sequence of the step emitted one token; the caller reads them off `decoding`
        before calling this when it needs each one (the server does, virtual time does not).
        """
        step = plan.index
        started: list[Seq] = []
        self.decode_ctx += plan.decodes * self.rate
        for seq, chunk in plan.prefill_chunks:
            seq.computed += chunk
            self.prefill_kv += chunk
            if seq.hashes:
                self._hold_computed(seq)
            if seq.computed < seq.prefill_target:
                continue
            # Prompt done: the step samples a token, and the sequence decodes from the next step.
            del self.prefilling[seq.request_id]
            self.prefill_kv -= seq.computed
            seq.generated += 1
            seq.segments.append((step, -1))
            started.append(seq)
            if seq.generated >= seq.max_tokens:
                continue
            seq.decode_start_step = step + 1
            self.decoding[seq.request_id] = seq
            self.decode_ctx += seq.prompt_tokens + seq.generated
            last = step + self._steps_left(seq)
            self._tiebreak += 1
            heapq.heappush(self.finish_heap, (last, self._tiebreak, seq.request_id))
        finished: list[Seq] = []
        for seq in started:
            if seq.generated >= seq.max_tokens:
                self._finish(seq, step)
                finished.append(seq)
        heap = self.finish_heap
        while heap and heap[0][0] <= step:
            _, _, rid = heapq.heappop(heap)
            seq_or_none = self.decoding.get(rid)
            if seq_or_none is None or seq_or_none.decode_start_step < 0:
                continue  # preempted since; a fresh entry was pushed on re-admission
            seq = seq_or_none
            if seq.decode_start_step + self._steps_left(seq) - 1 != step:
                continue  # stale entry from before a preemption
            del self.decoding[rid]
            self.decode_ctx -= self._decode_ctx_of(seq, step + 1)
            seq.generated = seq.generated_at(step + 1)
            self._finish(seq, step)
            finished.append(seq)
        self.step_index += 1
        return started, finished

    def _finish(self, seq: Seq, step: int) -> None:
        seq.finished = True
        seq.decode_start_step = -1
        if seq.segments and seq.segments[-1][1] == -1:
            seq.segments[-1] = (seq.segments[-1][0], step)
        if self.running.pop(seq.request_id, None) is not None:
            self.side_kv -= seq.side_kv
            self.reserved_kv -= seq.reserved
            seq.reserved = 0
        # The last sampled token was never fed back: its KV is not computed, so not cached.
        self._release(seq, seq.prompt_tokens + seq.generated - 1)

    # -- prefix caching (the rules: sim/prefix_cache.py) -------------------------------------------
    def _lookup(self, seq: Seq) -> tuple[int, int, int]:
        """(tokens of whole cached blocks to share, tokens hit in all, tokens those blocks newly take
        from free memory) for a waiting request."""
        cache, size = self.cache, self.cache_block
        if cache is None or not seq.hashes:
            return 0, 0, 0
        n, newly = cache.lookup(seq.hashes, seq.prefill_target)
        hit = n * size
        if cache.partial_reuse and seq.content is not None and n < len(seq.hashes):
            spans = seq.content.block_spans(n, size)
            hit += cache.partial_tokens(seq.hashes, n, spans, seq.prefill_target - 1 - hit)
        return n * size, hit, newly * size

    def _take(self, seq: Seq, shared: int, hit: int) -> None:
        """Admit with a hit: hold its whole blocks; the prompt continues after it."""
        cache = self.cache
        assert cache is not None
        size = self.cache_block
        cache.record(seq.prefill_target, hit, seq.preemptions > 0)
        if not seq.preemptions:
            seq.cached_tokens = hit
        if shared:
            cache.hold(seq.hashes, 0, shared // size)
            seq.held = shared // size
            self.held_kv += shared
        seq.computed = hit
        self.prefill_kv += hit

    def _hold_computed(self, seq: Seq) -> None:
        """The full blocks a prompt chunk completed are cached at once, so others can reuse them."""
        cache = self.cache
        assert cache is not None
        size = self.cache_block
        full = min(seq.computed // size, len(seq.hashes))
        if full <= seq.held:
            return
        cache.hold(seq.hashes, seq.held, full, seq.content if cache.partial_reuse else None)
        self.held_kv += (full - seq.held) * size
        seq.held = full

    def _release(self, seq: Seq, computed: int) -> None:
        """A request lets go of its KV (finished or preempted): its full blocks stay cached, free."""
        cache = self.cache
        if cache is None:
            return
        full = computed // self.cache_block
        if not seq.hashes:  # nothing held (a request without content holds no cached block)
            cache.release_anonymous(full)
            return
        cache.release(seq.hashes, seq.held, min(full, len(seq.hashes)),
                      seq.content if cache.partial_reuse else None)
        self.held_kv -= seq.held * self.cache_block
        seq.held = 0



__all__ = ["MIN_CACHE_BLOCK", "EngineConfig", "EngineCore", "Seq", "StepPlan"]  # Seq & co. live in sim/seq.py
