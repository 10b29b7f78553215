"""The prefix cache's rules (sim/prefix_cache.py), one by one."""

from __future__ import annotations

from orchestrator.loadgen.content import Content
from orchestrator.sim.prefix_cache import PrefixCache


def _hashes(*segments: tuple[int, int]) -> list[int]:
    return list(Content.of(list(segments)).block_hashes(16))


def test_whole_blocks_only_and_never_the_last_prompt_token() -> None:
    cache = PrefixCache(16)
    h = _hashes((1, 64))
    cache.release(h, 0, 4)  # a finished request left 4 blocks
    assert cache.lookup(h, 64) == 3  # 63 tokens may hit: 3 whole blocks
    assert cache.lookup(h, 65) == 4
    assert cache.lookup(_hashes((1, 40), (2, 24)), 64) == 2  # diverges inside block 3


def test_free_blocks_go_least_recently_freed_first_and_tail_first() -> None:
    cache = PrefixCache(16)
    a, b = _hashes((1, 64)), _hashes((2, 64))
    cache.release(a, 0, 4)
    cache.release(b, 0, 4)
    cache.trim(6)  # two blocks must go: a's, tail first
    assert cache.lookup(a, 100) == 2 and cache.lookup(b, 100) == 4
    cache.trim(0)
    assert cache.free_blocks == 0 and cache.lookup(b, 100) == 0
    assert cache.stats().evicted_blocks == 8


def test_held_blocks_are_never_evicted_and_count_once() -> None:
    cache = PrefixCache(16)
    h = _hashes((1, 64))
    cache.hold(h, 0, 4)
    cache.hold(h, 0, 2)  # a second request shares the first two
    assert cache.held_blocks == 4
    cache.trim(0)
    assert cache.lookup(h, 100) == 4
    cache.release(h, 2, 2)  # the second ends: blocks 0-1 still held by the first
    assert cache.held_blocks == 4 and cache.free_blocks == 0
    cache.release(h, 4, 4)
    assert cache.held_blocks == 0 and cache.free_blocks == 4


def test_anonymous_blocks_take_room_without_ever_hitting() -> None:
    cache = PrefixCache(16)
    h = _hashes((1, 32))
    cache.release(h, 0, 2)
    cache.release_anonymous(10)
    cache.trim(11)  # one block must go: the oldest freed, the request's tail
    assert cache.lookup(h, 100) == 1 and cache.free_blocks == 11
    cache.trim(10)
    assert cache.lookup(h, 100) == 0
    cache.trim(4)
    assert cache.free_blocks == 4  # part of the anonymous run


def test_partial_reuse_matches_the_leading_tokens_of_a_block() -> None:
    cache = PrefixCache(16, partial_reuse=True)
    a = Content.of([(1, 16), (2, 16)])
    ha = list(a.block_hashes(16))
    cache.describe(ha[0], 0x5EED, a.block_spans(0, 16))
    cache.describe(ha[1], ha[0], a.block_spans(1, 16))
    cache.release(ha, 0, 2)
    b = Content.of([(1, 16), (2, 10), (3, 20)])
    hb = list(b.block_hashes(16))
    assert cache.lookup(hb, b.end) == 1
    assert cache.partial_tokens(hb[0], b.block_spans(1, 16), 100) == 10
    cache.trim(0)
    assert not cache.children and not cache.spans
