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

Bookkeeping: the cached blocks form a tree of extents (runs of consecutive blocks of one chain, all
held by the same requests and freed together), not a table of blocks, so a turn of a long
conversation costs a few extents, not one dict entry per block of its history. This is exact because
of two properties of the rules above: a request holds a prefix of its chain (so a block is held at
least as often as the blocks after it), and the free queue therefore always lists a block after every
cached block that follows it (freed earlier, or tail first in the same release). So eviction takes
leaves only, the cached blocks of a chain are always a prefix of it, and the blocks one release frees
stay one stretch of a chain (re-held or re-freed from the top, evicted from the bottom). An extent is
split where a hold, a hit or a release ends inside it; the chain hashes make a match a comparison of
one hash per extent (a block's hash covers every block before it).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.loadgen.content import Content

Spans = tuple[tuple[int, int, int], ...]
NO_TRIM = sys.maxsize


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
    """The blocks one release freed (the unit of the LRU order): a stretch of one chain, evicted from
    its `bottom` extent upwards. `live` counts its blocks still free (the others were held or freed
    again since); anonymous runs are only a count."""

    __slots__ = ("anonymous", "bottom", "live")

    def __init__(self, anonymous: int = 0) -> None:
        self.anonymous, self.live = anonymous, 0
        self.bottom: _Extent | None = None


class _Extent:
    """Consecutive cached blocks of one chain, from block `depth` on, with one holder count and (when
    free) one run. Children hang after its last block, keyed by their first hash. `content` (partial
    reuse only) names what the blocks hold."""

    __slots__ = ("children", "content", "depth", "hashes", "parent", "refs", "run")

    def __init__(self, parent: _Extent | None, depth: int, hashes: list[int], refs: int,
                 content: Content | None) -> None:
        self.parent, self.depth, self.hashes, self.refs, self.content = parent, depth, hashes, refs, content
        self.children: dict[int, _Extent] = {}
        self.run: _Run | None = None


class PrefixCache:
    """Cached blocks of one engine, held by running requests or free (module docstring)."""

    def __init__(self, block_tokens: int, *, partial_reuse: bool = False) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.partial_reuse = partial_reuse
        self.root = _Extent(None, 0, [], 1, None)
        self.runs: deque[_Run] = deque()  # oldest first
        self._free = 0  # free blocks, hashed + anonymous (as of the last trim: free_blocks)
        self.trim_room = NO_TRIM  # a trim asked for (trim_later) and not applied yet
        self.free_hashed = 0  # free blocks with a hash (the others are anonymous runs)
        self.held_blocks = 0  # blocks some running request holds (each counted once)
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evicted_blocks = 0

    # -- finding blocks ----------------------------------------------------------------------------
    def _walk(self, hashes: Sequence[int], limit: int) -> tuple[list[tuple[_Extent, int]], int]:
        """The extents that hold the leading blocks of `hashes` (at most `limit`), with how many blocks
        of each match; and how many blocks match in all."""
        path: list[tuple[_Extent, int]] = []
        node, pos = self.root, 0
        while pos < limit:
            child = node.children.get(hashes[pos])
            if child is None:
                break
            own = child.hashes
            m = min(len(own), limit - pos)
            if own[m - 1] != hashes[pos + m - 1]:  # they part inside: the first block that differs
                lo, hi = 1, m - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if own[mid - 1] == hashes[pos + mid - 1]:
                        lo = mid
                    else:
                        hi = mid - 1
                m = lo
            path.append((child, m))
            pos += m
            if m < len(own):
                break
            node = child
        return path, pos

    def _split(self, node: _Extent, k: int) -> _Extent:
        """Cut `node` after its first k blocks; the new upper extent is returned, and `node` keeps the
        rest (so whoever points at a chain's last extent still does)."""
        parent = node.parent
        assert parent is not None and 0 < k < len(node.hashes)
        upper = _Extent(parent, node.depth, node.hashes[:k], node.refs, node.content)
        upper.run = node.run
        parent.children[upper.hashes[0]] = upper
        del node.hashes[:k]
        node.depth += k
        node.parent = upper
        upper.children[node.hashes[0]] = node
        return upper

    def _cut(self, hashes: Sequence[int], start: int, stop: int) -> list[_Extent]:
        """The extents that hold blocks [start, stop) of `hashes` exactly (split where needed); every
        block before `stop` must be cached."""
        out: list[_Extent] = []
        node, pos = self.root, 0
        while pos < stop:
            child = node.children[hashes[pos]]
            end = pos + len(child.hashes)
            if end <= start:
                node, pos = child, end
                continue
            if pos < start:
                node, pos = self._split(child, start - pos), start
                continue
            if end > stop:
                out.append(self._split(child, stop - pos))
                break
            out.append(child)
            node, pos = child, end
        return out

    # -- lookup ------------------------------------------------------------------------------------
    def lookup(self, hashes: Sequence[int], num_tokens: int) -> tuple[int, int]:
        """(leading blocks of `hashes` that are cached, within `num_tokens - 1` tokens (whole blocks);
        how many of those are free now: taking them costs that much memory)."""
        self.settle()
        limit = min(len(hashes), (num_tokens - 1) // self.block_tokens)
        path, n = self._walk(hashes, limit)
        return n, sum(m for node, m in path if not node.refs)

    def partial_tokens(self, hashes: Sequence[int], n: int, spans: Spans, limit: int) -> int:
        """partial_reuse: how many leading tokens of block `n` of `hashes` (its spans) some cached block
        after block n - 1 holds, at most `limit` (blocks before n are cached)."""
        self.settle()
        size = self.block_tokens
        path, _ = self._walk(hashes, n)
        node = path[-1][0] if path else self.root
        if path and path[-1][1] < len(node.hashes):  # block n - 1 inside an extent: one block follows
            others: list[tuple[Content | None, int]] = [(node.content, n)]
        else:
            others = [(child.content, child.depth) for child in node.children.values()]
        best = 0
        for content, index in others:
            if content is not None:
                best = max(best, _common(spans, content.block_spans(index, size)))
        return min(best, limit)

    def record(self, num_tokens: int, hit_tokens: int, preempted: bool) -> None:
        if preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit_tokens
        else:
            self.queries += num_tokens
            self.hits += hit_tokens

    def stats(self) -> CacheStats:
        self.settle()
        return CacheStats(self.queries, self.hits, self.preempted_queries, self.preempted_hits,
                          self.evicted_blocks)

    # -- holding and letting go --------------------------------------------------------------------
    def hold(self, hashes: Sequence[int], start: int, stop: int, content: Content | None = None) -> None:
        """A running request holds blocks [start, stop): hit ones, or ones it just computed (`content`:
        what they hold, for partial reuse). It holds blocks [0, start) already."""
        if stop <= start:
            return
        self.settle()
        _, n = self._walk(hashes, stop)
        for node in self._cut(hashes, start, n):
            if not node.refs:  # free until now: it leaves its run
                count = len(node.hashes)
                run = node.run
                assert run is not None
                run.live -= count
                node.run = None
                self._free -= count
                self.free_hashed -= count
                self.held_blocks += count
            node.refs += 1
        if n < stop:
            self._grow(hashes, n, stop, 1, True, content)
            self.held_blocks += stop - n

    def _grow(self, hashes: Sequence[int], start: int, stop: int, refs: int, mine: bool,
              content: Content | None) -> _Extent:
        """Blocks [start, stop) of `hashes` are cached newly, after cached block start - 1, with `refs`
        holders: the extent that holds them. When this request (`mine`) alone holds block start - 1 at
        the end of its extent, that extent grows in place (a conversation stays one extent)."""
        parent = self.root
        if start:  # the extent that ends with block start - 1 (split after it where it goes on)
            path, _ = self._walk(hashes, start)
            parent, m = path[-1]
            if m < len(parent.hashes):
                parent = self._split(parent, m)
        if mine and parent is not self.root and parent.refs == 1 and not parent.children:
            parent.hashes.extend(hashes[start:stop])
            if content is not None:
                parent.content = content
            return parent
        node = _Extent(parent, start, list(hashes[start:stop]), refs, content)
        parent.children[node.hashes[0]] = node
        return node

    def release(self, hashes: Sequence[int], held: int, full: int, content: Content | None = None) -> None:
        """A request ends or is preempted: it held blocks [0, held) and computed full blocks up to
        `full`; its own blocks [held, full) become cached too. Tail first (module docstring)."""
        self.settle()
        run = _Run()
        bottom: _Extent | None = None
        mine = held  # blocks this request holds: its own new ones too, when they grew its extent
        if full > held:
            _, n = self._walk(hashes, full)
            # Blocks another running request holds are not this request's to cache (its copy is just
            # freed); blocks free already are freed again (into this run), new ones join.
            for node in self._cut(hashes, held, n):
                if node.refs:
                    continue
                old = node.run
                assert old is not None
                old.live -= len(node.hashes)
                node.run = run
                run.live += len(node.hashes)
                bottom = node
            if n < full:
                node = self._grow(hashes, n, full, 0, n == held > 0, content)
                if node.refs:  # grown in place: this request's own extent, freed with its holds below
                    self.held_blocks += full - n
                    mine = full
                else:
                    node.run = run
                    run.live += full - n
                    self._free += full - n
                    self.free_hashed += full - n
                    bottom = node
        for node in reversed(self._cut(hashes, 0, mine)):  # tail first
            node.refs -= 1
            if node.refs:
                continue
            count = len(node.hashes)
            node.run = run
            run.live += count
            self._free += count
            self.free_hashed += count
            self.held_blocks -= count
            if bottom is None:
                bottom = node
        if run.live:
            run.bottom = bottom
            self.runs.append(run)

    def release_anonymous(self, blocks: int) -> None:
        """A request whose content nobody shares frees `blocks` full blocks: LRU room, never a hit.
        Anonymous blocks freed one after another are one run: nothing tells them apart, and eviction
        takes them in order either way (so a workload without shared content keeps one run)."""
        if blocks > 0:
            if self.trim_room != NO_TRIM:  # settle(), inline: once per request
                self.trim(NO_TRIM)
            runs = self.runs
            if runs and runs[-1].anonymous:
                runs[-1].anonymous += blocks
            else:
                runs.append(_Run(blocks))
            self._free += blocks

    @property
    def free_blocks(self) -> int:
        """Free cached blocks (hashed + anonymous), after any trim asked for."""
        self.settle()
        return self._free

    def trim_later(self, room_blocks: int) -> None:
        """`trim(room_blocks)` when the cache is next used: the engine asks for a trim after every step,
        and most steps are decodes that use nothing else of the cache. Exact: trims in a row evict a
        prefix of one order (least recently freed first), so they amount to the smallest one."""
        if room_blocks < self.trim_room:
            self.trim_room = room_blocks

    def settle(self) -> None:
        """Apply the trim asked for by trim_later, if any (every other method does this first)."""
        if self.trim_room != NO_TRIM:
            self.trim(NO_TRIM)

    def trim(self, room_blocks: int) -> None:
        """Evict least recently freed blocks until the free cached ones fit in `room_blocks` (and in
        the room a pending trim_later asked for)."""
        room = max(min(room_blocks, self.trim_room), 0)
        self.trim_room = NO_TRIM
        runs = self.runs
        if self._free > room and runs and runs[0].anonymous > self._free - room:
            # The common case without shared content: part of the oldest run, an anonymous one.
            take = self._free - room
            runs[0].anonymous -= take
            self._free = room
            self.evicted_blocks += take
            return
        while self._free > room and runs:
            run = runs[0]
            if run.anonymous:
                take = min(run.anonymous, self._free - room)
                run.anonymous -= take
                self._free -= take
                self.evicted_blocks += take
                if not run.anonymous:
                    runs.popleft()
                continue
            node = run.bottom
            if not run.live or node is None:
                runs.popleft()
                continue
            # The run's deepest extent, tail first; what followed it was evicted before (it was freed
            # earlier, or after it in this run).
            assert node.run is run and not node.children
            take = min(len(node.hashes), self._free - room)
            run.live -= take
            self._free -= take
            self.free_hashed -= take
            self.evicted_blocks += take
            if take < len(node.hashes):
                del node.hashes[len(node.hashes) - take:]
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.hashes[0]]
            node.run = None
            run.bottom = parent if parent.run is run else None


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
