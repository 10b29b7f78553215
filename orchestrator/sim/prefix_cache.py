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
(`copy_on_partial_reuse`): the hit is token-granular, the shared part whole blocks.

Memory: blocks held by running requests count once however many requests hold them; blocks no
request holds are free memory that happens to be cached, evicted when the engine needs room (`trim`).
Blocks of a request without content (random prompts, which no other prompt shares) are tracked as
anonymous runs: they take LRU room like any other free block without being hashed.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

Spans = tuple[tuple[int, int, int], ...]


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


class PrefixCache:
    """Cached blocks of one engine: held (by running requests, with a count) or free (LRU order)."""

    def __init__(self, block_tokens: int, *, partial_reuse: bool = False) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.partial_reuse = partial_reuse
        self.held: dict[int, int] = {}  # block hash -> running requests holding it
        # Free cached blocks, least recently freed first; value = blocks (1, or an anonymous run's).
        self.free: OrderedDict[int | tuple[int], int] = OrderedDict()
        self.free_blocks = 0
        self._anon = itertools.count()  # anonymous runs are keyed (n,): never equal to a hash
        # partial_reuse only: what each cached block holds, to match a block's leading tokens.
        self.spans: dict[int, tuple[int, Spans]] = {}  # hash -> (parent hash, spans)
        self.children: dict[int, set[int]] = {}  # parent hash -> cached child hashes
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evicted_blocks = 0

    # -- lookup ------------------------------------------------------------------------------------
    def cached(self, h: int) -> bool:
        return h in self.held or h in self.free

    def lookup(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Leading blocks of `hashes` that are cached, within `num_tokens - 1` tokens (whole blocks)."""
        limit = min((num_tokens - 1) // self.block_tokens, len(hashes))
        held, free = self.held, self.free
        n = 0
        while n < limit and (hashes[n] in held or hashes[n] in free):
            n += 1
        return n

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
    def newly_held(self, hashes: Sequence[int], n: int) -> int:
        """How many of the first n blocks are free now (taking them costs that much memory)."""
        free = self.free
        return sum(1 for i in range(n) if hashes[i] in free)

    def hold(self, hashes: Sequence[int], start: int, stop: int) -> None:
        """A running request holds blocks [start, stop): hit ones, or ones it just computed."""
        held, free = self.held, self.free
        for i in range(start, stop):
            h = hashes[i]
            count = held.get(h)
            if count is not None:
                held[h] = count + 1
                continue
            if h in free:
                del free[h]
                self.free_blocks -= 1
            held[h] = 1

    def describe(self, h: int, parent: int, spans: Spans) -> None:
        """partial_reuse: remember what block `h` holds (called when it is first cached)."""
        if h not in self.spans:
            self.spans[h] = (parent, spans)
            self.children.setdefault(parent, set()).add(h)

    def release(self, hashes: Sequence[int], held: int, full: int) -> None:
        """A request ends or is preempted: it held blocks [0, held) and computed full blocks up to
        `full`; its own blocks [held, full) become cached too. Tail first (module docstring)."""
        free, held_map = self.free, self.held
        for i in range(full - 1, held - 1, -1):
            h = hashes[i]
            if h in held_map:
                continue  # another running request holds the same block: this copy is just freed
            if h in free:
                free.move_to_end(h)
            else:
                free[h] = 1
                self.free_blocks += 1
        for i in range(held - 1, -1, -1):
            h = hashes[i]
            count = held_map[h] - 1
            if count:
                held_map[h] = count
            else:
                del held_map[h]
                free[h] = 1
                self.free_blocks += 1

    def release_anonymous(self, blocks: int) -> None:
        """A request whose content nobody shares frees `blocks` full blocks: LRU room, never a hit."""
        if blocks > 0:
            self.free[(next(self._anon),)] = blocks
            self.free_blocks += blocks

    @property
    def held_blocks(self) -> int:
        return len(self.held)

    def trim(self, room_blocks: int) -> None:
        """Evict least recently freed blocks until the free cached ones fit in `room_blocks`."""
        free = self.free
        while self.free_blocks > max(room_blocks, 0) and free:
            h, n = next(iter(free.items()))
            over = self.free_blocks - max(room_blocks, 0)
            if isinstance(h, tuple) and n > over:  # an anonymous run: only as much of it as needed
                free[h] = n - over
                self.free_blocks -= over
                self.evicted_blocks += over
                return
            del free[h]
            self.free_blocks -= n
            self.evicted_blocks += n
            if self.spans and isinstance(h, int):
                parent, _ = self.spans.pop(h, (None, ()))
                kids = self.children.get(parent) if parent is not None else None
                if kids is not None:
                    kids.discard(h)
                    if not kids:
                        del self.children[parent]  # type: ignore[arg-type]


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
