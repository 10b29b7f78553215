"""The prefix cache of one simulated engine (one DP rank): which KV blocks can be reused, and when they go.

As vLLM v1 does it by default (automatic prefix caching, on unless --no-enable-prefix-caching):
- A block is identified by the hash of its parent block's hash and its own tokens; only full blocks
  get one (vllm/v1/core/kv_cache_utils.py `hash_block_tokens`, block_pool.py `cache_full_blocks`).
- A new request reuses the longest run of leading blocks whose hashes are cached, whole blocks only,
  and never its last prompt token: the hit is at most `num_tokens - 1` tokens rounded down to a block
  (kv_cache_manager.py `get_computed_blocks`: "we must recompute the last token to obtain logits").
- A block is cached as soon as it is full (prompt chunks as they are computed; here an answer's
  blocks when the request ends), so a request can reuse what a running one computed.
- A block stays cached after its requests let go of it, as a free block, until the memory is needed:
  free blocks are reused least recently freed first (block_pool.py `get_new_blocks` pops the head of
  the free queue and evicts its hash), and a request's blocks are freed tail first
  (single_type_kv_cache_manager.py `free`: "reverse order so that the tail blocks are freed first"),
  so a shared prefix outlives the suffixes behind it.
- A preempted request frees its blocks the same way, so its computed blocks stay cached and its
  recompute reuses whatever is still there (vLLM v1's recompute preemption; also asked by issue 26).
- Hit counters as vLLM's `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` (tokens), which count
  requests that were never preempted; the recomputes of preempted ones are counted apart
  (vllm/v1/metrics/stats.py `PrefixCacheStats.record`). vLLM counts a lookup again on every step a
  request waits at the head of the queue; here each admission counts once.

With `partial_reuse` (TensorRT-LLM's rule, `KvCacheConfig.enable_partial_reuse`, on by default), a
block whose leading tokens match a cached block is reused up to the match too, as a private copy
(`copy_on_partial_reuse`): the hit is token-granular, the shared part whole blocks. The engine uses it
as well for a token-granular cache (SGLang's radix tree at page size 1), hashed in blocks of 16.

Memory: blocks held by running requests count once however many requests hold them; blocks no
request holds are free memory that happens to be cached, evicted when the engine needs room (`trim`).
Blocks of a request without content (random prompts, which no other prompt shares) are tracked as
anonymous runs: they take LRU room like any other free block without being hashed.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, not_, sub

Spans = tuple[tuple[int, int, int], ...]
COMPACT_SLACK = 4096  # stale run entries tolerated beyond the live ones before a compaction


@dataclass(frozen=True)
class CacheStats:
    """Prefix-cache counters in tokens, as vLLM names them."""

    queries: int = 0  # prompt tokens looked up by requests never preempted
    hits: int = 0  # of those, tokens found cached
    preempted_queries: int = 0  # the same for recomputes after a preemption
    preempted_hits: int = 0
    evicted_blocks: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None

    def __add__(self, other: CacheStats) -> CacheStats:
        return CacheStats(self.queries + other.queries, self.hits + other.hits,
                          self.preempted_queries + other.preempted_queries,
                          self.preempted_hits + other.preempted_hits,
                          self.evicted_blocks + other.evicted_blocks)


class _Run:
    """Blocks freed together (one request letting go), tail first: the unit of the LRU order. `live`
    counts those still free since this run (the others were held or freed again: their entries are
    stale and skipped)."""

    __slots__ = ("anonymous", "hashes", "live", "pos", "stamp")

    def __init__(self, stamp: int, hashes: list[int], anonymous: int = 0) -> None:
        self.stamp, self.hashes, self.anonymous, self.pos = stamp, hashes, anonymous, 0
        self.live = len(hashes)


class PrefixCache:
    """Cached blocks of one engine: each with the count of running requests holding it (0: free).

    The LRU order of free blocks is kept as runs: the blocks one request freed, in the order they are
    to go. A block held again, or freed again later, leaves its run (`freed_in` names the run it is
    free in; the run's live count drops) and its entry there goes stale; runs with nothing live are
    dropped whole. So a turn of a long conversation touches each block of its history only with dict
    updates over slices that run in C (map, compress, dict.update, Counter), never a Python loop per
    block: eviction alone walks blocks one by one, and each block is evicted once."""

    def __init__(self, block_tokens: int, *, partial_reuse: bool = False) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.partial_reuse = partial_reuse
        self.refs: dict[int, int] = {}  # cached block hash -> running requests holding it (0: free)
        self.freed_in: dict[int, int] = {}  # free block hash -> stamp of the run it is free in
        self.runs: deque[_Run] = deque()  # oldest first
        self.run_of: dict[int, _Run] = {}  # stamp -> run, for the runs still queued
        self.free_blocks = 0  # hashed + anonymous
        self.free_hashed = 0  # free blocks with a hash (the others are anonymous runs)
        self._stamp = itertools.count()
        self._stale = 0  # stale entries in partly live runs: compacted when they outnumber the live
        # partial_reuse only: what each cached block holds, to match a block's leading tokens.
        self.spans: dict[int, tuple[int, Spans]] = {}  # hash -> (parent hash, spans)
        self.children: dict[int, set[int]] = {}  # parent hash -> cached child hashes
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evicted_blocks = 0

    # -- lookup ------------------------------------------------------------------------------------
    def cached(self, h: int) -> bool:
        return h in self.refs

    def lookup(self, hashes: Sequence[int], num_tokens: int) -> tuple[int, int]:
        """(leading blocks of `hashes` that are cached, within `num_tokens - 1` tokens (whole blocks);
        how many of those are free now: taking them costs that much memory)."""
        seg = hashes[: (num_tokens - 1) // self.block_tokens]
        present = list(map(self.refs.__contains__, seg))
        try:
            n = present.index(False)
        except ValueError:
            n = len(present)
        if not n:
            return 0, 0
        return n, list(map(self.refs.__getitem__, seg[:n])).count(0)

    def partial_tokens(self, parent: int, spans: Spans, limit: int) -> int:
        """partial_reuse: how many leading tokens of a block (its parent hash and spans) some cached
        block after the same parent holds, at most `limit`."""
        best = 0
        for child in self.children.get(parent, ()):
            best = max(best, _common(spans, self.spans[child][1]))
        return min(best, limit)

    def record(self, num_tokens: int, hit_tokens: int, preempted: bool) -> None:
        if preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit_tokens
        else:
            self.queries += num_tokens
            self.hits += hit_tokens

    def stats(self) -> CacheStats:
        return CacheStats(self.queries, self.hits, self.preempted_queries, self.preempted_hits,
                          self.evicted_blocks)

    # -- holding and letting go --------------------------------------------------------------------
    def _leave_runs(self, blocks: list[int]) -> None:
        """Free `blocks` stop being free where they were (held again, or freed again into a new run)."""
        run_of = self.run_of
        for stamp, k in Counter(map(self.freed_in.__getitem__, blocks)).items():
            run = run_of.get(stamp)
            if run is None:
                continue
            before, run.live = run.live, run.live - k
            if run.live:
                self._stale += k
            else:  # nothing of it is free any more: drop it whole, stale entries and all
                self._stale -= len(run.hashes) - run.pos - before
                del run_of[stamp]

    def hold(self, hashes: Sequence[int], start: int, stop: int) -> None:
        """A running request holds blocks [start, stop): hit ones, or ones it just computed."""
        seg = hashes[start:stop]
        refs = self.refs
        old = list(map(refs.get, seg, repeat(None)))
        refs.update(zip(seg, [1 if o is None else o + 1 for o in old], strict=True))
        was_free = list(compress(seg, map(eq, old, repeat(0))))
        if was_free:
            self._leave_runs(was_free)
            self.free_blocks -= len(was_free)
            self.free_hashed -= len(was_free)

    def describe(self, h: int, parent: int, spans: Spans) -> None:
        """partial_reuse: remember what block `h` holds (called when it is first cached)."""
        if h not in self.spans:
            self.spans[h] = (parent, spans)
            self.children.setdefault(parent, set()).add(h)

    def release(self, hashes: Sequence[int], held: int, full: int) -> None:
        """A request ends or is preempted: it held blocks [0, held) and computed full blocks up to
        `full`; its own blocks [held, full) become cached too. Tail first (module docstring)."""
        refs = self.refs
        freed: list[int] = []
        own = hashes[held:full][::-1]
        if own:
            old = list(map(refs.get, own))
            # Blocks another running request holds are not this request's to cache (its copy is just
            # freed); blocks free already are freed again (into this run), new ones join.
            again = list(compress(own, map(eq, old, repeat(0))))
            if again:
                self._leave_runs(again)
            freed = list(compress(own, map(not_, old)))
            added = old.count(None)
            self.free_blocks += added
            self.free_hashed += added
        mine = hashes[:held][::-1]
        if mine:
            counts = list(map(sub, map(refs.__getitem__, mine), repeat(1)))
            refs.update(zip(mine, counts, strict=True))
            now_free = list(compress(mine, map(not_, counts)))
            self.free_blocks += len(now_free)
            self.free_hashed += len(now_free)
            freed += now_free
        if freed:
            refs.update(zip(freed, repeat(0)))
            run = _Run(next(self._stamp), freed)
            self.freed_in.update(zip(freed, repeat(run.stamp)))
            self.runs.append(run)
            self.run_of[run.stamp] = run
            if self._stale > self.free_hashed + COMPACT_SLACK:
                self._compact()

    def release_anonymous(self, blocks: int) -> None:
        """A request whose content nobody shares frees `blocks` full blocks: LRU room, never a hit."""
        if blocks > 0:
            self.runs.append(_Run(next(self._stamp), [], blocks))
            self.free_blocks += blocks

    @property
    def held_blocks(self) -> int:
        return len(self.refs) - self.free_hashed

    def trim(self, room_blocks: int) -> None:
        """Evict least recently freed blocks until the free cached ones fit in `room_blocks`."""
        room = max(room_blocks, 0)
        refs, freed_in, runs, run_of = self.refs, self.freed_in, self.runs, self.run_of
        while self.free_blocks > room and runs:
            run = runs[0]
            if run.anonymous:
                take = min(run.anonymous, self.free_blocks - room)
                run.anonymous -= take
                self.free_blocks -= take
                self.evicted_blocks += take
                if not run.anonymous:
                    runs.popleft()
                continue
            if run.stamp not in run_of:  # nothing of it is free any more
                runs.popleft()
                continue
            hashes, stamp = run.hashes, run.stamp
            while run.live and self.free_blocks > room:
                h = hashes[run.pos]
                run.pos += 1
                if refs.get(h) != 0 or freed_in.get(h) != stamp:
                    self._stale -= 1
                    continue  # held again, or freed again later: not this run's to evict
                del refs[h], freed_in[h]
                run.live -= 1
                self.free_blocks -= 1
                self.free_hashed -= 1
                self.evicted_blocks += 1
                if self.spans:
                    self._forget(h)
            if not run.live:  # what is left of it is stale
                self._stale -= len(hashes) - run.pos
                runs.popleft()
                del run_of[stamp]

    def _compact(self) -> None:
        """Drop runs with nothing free left, and the stale entries of the others."""
        refs, freed_in = self.refs, self.freed_in
        kept: deque[_Run] = deque()
        for run in self.runs:
            if run.anonymous:
                kept.append(run)
            elif run.stamp in self.run_of:
                stamp = run.stamp
                run.hashes = [h for h in run.hashes[run.pos:]
                              if refs.get(h) == 0 and freed_in.get(h) == stamp]
                run.pos, run.live = 0, len(run.hashes)
                kept.append(run)
        self.runs, self._stale = kept, 0

    def _forget(self, h: int) -> None:
        known = self.spans.pop(h, None)
        if known is None:
            return
        kids = self.children.get(known[0])
        if kids is not None:
            kids.discard(h)
            if not kids:
                del self.children[known[0]]


def _common(a: Spans, b: Spans) -> int:
    """Leading tokens two blocks' spans share."""
    n = 0
    for (ka, sa, ea), (kb, sb, eb) in zip(a, b, strict=False):
        if ka != kb or sa != sb:
            return n
        n += min(ea, eb) - sa
        if ea != eb:
            return n
    return n
