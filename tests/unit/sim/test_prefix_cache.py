"""The prefix cache's rules (sim/prefix_cache.py), one by one."""

from __future__ import annotations

import pytest

from orchestrator.loadgen.content import Content
from orchestrator.sim.prefix_cache import PrefixCache


def _hashes(*segments: tuple[int, int]) -> list[int]:
    return list(Content.of(list(segments)).block_hashes(16))


def test_whole_blocks_only_and_never_the_last_prompt_token() -> None:
    cache = PrefixCache(16)
    h = _hashes((1, 64))
    cache.release(h, 0, 4)  # a finished request left 4 blocks
    assert cache.lookup(h, 64)[0] == 3  # 63 tokens may hit: 3 whole blocks
    assert cache.lookup(h, 65)[0] == 4
    assert cache.lookup(_hashes((1, 40), (2, 24)), 64) == (2, 2)  # diverges in block 3; both free


def test_free_blocks_go_least_recently_freed_first_and_tail_first() -> None:
    cache = PrefixCache(16)
    a, b = _hashes((1, 64)), _hashes((2, 64))
    cache.release(a, 0, 4)
    cache.release(b, 0, 4)
    cache.trim(6)  # two blocks must go: a's, tail first
    assert cache.lookup(a, 100)[0] == 2 and cache.lookup(b, 100)[0] == 4
    cache.trim(0)
    assert cache.free_blocks == 0 and cache.lookup(b, 100)[0] == 0
    assert cache.stats().evicted_blocks == 8


def test_held_blocks_are_never_evicted_and_count_once() -> None:
    cache = PrefixCache(16)
    h = _hashes((1, 64))
    cache.hold(h, 0, 4)
    cache.hold(h, 0, 2)  # a second request shares the first two
    assert cache.held_blocks == 4
    cache.trim(0)
    assert cache.lookup(h, 100)[0] == 4
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
    assert cache.lookup(h, 100)[0] == 1 and cache.free_blocks == 11
    cache.trim(10)
    assert cache.lookup(h, 100)[0] == 0
    cache.trim(4)
    assert cache.free_blocks == 4  # part of the anonymous run


def test_partial_reuse_matches_the_leading_tokens_of_a_block() -> None:
    cache = PrefixCache(16, partial_reuse=True)
    a = Content.of([(1, 16), (2, 16)])
    ha = list(a.block_hashes(16))
    cache.hold(ha, 0, 2, a)
    cache.release(ha, 2, 2, a)
    b = Content.of([(1, 16), (2, 10), (3, 20)])
    hb = list(b.block_hashes(16))
    assert cache.lookup(hb, b.end)[0] == 1
    assert cache.partial_tokens(hb, 1, b.block_spans(1, 16), 100) == 10
    assert cache.partial_tokens(hb, 1, b.block_spans(1, 16), 4) == 4  # never past the limit
    c = Content.of([(1, 16), (4, 16)])  # another block after the first: the better match counts
    hc = list(c.block_hashes(16))
    cache.hold(hc, 0, 1)
    cache.hold(hc, 1, 2, c)
    cache.release(hc, 2, 2, c)
    assert cache.partial_tokens(hb, 1, b.block_spans(1, 16), 100) == 10
    assert cache.partial_tokens(hc, 1, Content.of([(1, 16), (4, 9)]).block_spans(1, 16), 100) == 9
    cache.trim(0)
    assert cache.partial_tokens(hb, 0, b.block_spans(0, 16), 100) == 0 and cache.free_blocks == 0


class _Reference:
    """The same rules, written the plain way (one OrderedDict in LRU order), to check the fast one."""

    def __init__(self) -> None:
        from collections import OrderedDict

        self.held: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()

    def lookup(self, hashes: list[int], num_tokens: int) -> tuple[int, int]:
        n = newly = 0
        for h in hashes[: (num_tokens - 1) // 16]:
            if h in self.held:
                n += 1
            elif h in self.free:
                n, newly = n + 1, newly + 1
            else:
                break
        return n, newly

    def hold(self, hashes: list[int], start: int, stop: int) -> None:
        for h in hashes[start:stop]:
            self.free.pop(h, None)
            self.held[h] = self.held.get(h, 0) + 1

    def release(self, hashes: list[int], held: int, full: int) -> None:
        for h in reversed(hashes[held:full]):
            if h not in self.held:
                self.free.pop(h, None)
                self.free[h] = None
        for h in reversed(hashes[:held]):
            self.held[h] -= 1
            if not self.held[h]:
                del self.held[h]
                self.free[h] = None

    def trim(self, room: int) -> None:
        while len(self.free) > room:
            self.free.popitem(last=False)


def _chains(seed: int) -> list[list[int]]:
    """Chains that share prefixes at several depths (a system prompt, conversations that extend one
    another) and part inside blocks, so extents split and grow every which way."""
    import random

    rng = random.Random(seed)
    roots = [Content.of([(k, 16 * rng.randint(1, 6) + rng.choice((0, 5)))]) for k in range(4)]
    out: list[Content] = list(roots)
    for k in range(60):
        base = rng.choice(out)
        out.append(base.then(100 + k % 23, rng.randint(1, 70)))
    return [list(c.block_hashes(16)) for c in out if c.end >= 16]


def _check_tree(cache: PrefixCache) -> None:
    """The extent tree's own invariants: every cached block counted once, held or free; a block held at
    least as often as the ones after it; a free extent in a run, a held one in none."""
    blocks = 0
    todo = [(cache.root, 1 << 30)]
    while todo:
        node, above = todo.pop()
        for first, child in node.children.items():
            assert child.hashes and child.hashes[0] == first and child.parent is node
            assert child.refs <= above and (child.run is None) == (child.refs > 0)
            blocks += len(child.hashes)
            todo.append((child, child.refs))
    assert blocks == cache.held_blocks + cache.free_hashed


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_the_fast_bookkeeping_follows_the_plain_rules(seed: int) -> None:
    import random

    rng = random.Random(seed)
    fast, ref = PrefixCache(16), _Reference()
    chains = _chains(seed)
    running: list[tuple[list[int], int]] = []
    for step in range(4000):
        op = rng.random()
        if op < 0.4 or not running:
            h = rng.choice(chains)
            tokens = len(h) * 16 if rng.random() < 0.8 else rng.randint(1, len(h) * 16)
            n, newly = fast.lookup(h, tokens)
            assert (n, newly) == ref.lookup(h, tokens), step
            fast.hold(h, 0, n)
            ref.hold(h, 0, n)
            running.append((h, n))
        elif op < 0.55:  # a running request computes more of its prompt: those blocks are held too
            k = rng.randrange(len(running))
            h, n = running[k]
            more = rng.randint(n, len(h))
            fast.hold(h, n, more)
            ref.hold(h, n, more)
            running[k] = (h, more)
        elif op < 0.9:
            h, n = running.pop(rng.randrange(len(running)))
            full = rng.randint(n, len(h))
            fast.release(h, n, full)
            ref.release(h, n, full)
        else:
            room = rng.randint(0, 60)
            fast.trim(room)
            ref.trim(room)
        assert fast.free_hashed == fast.free_blocks == len(ref.free), step
        assert fast.held_blocks == len(ref.held), step
        if step % 50 == 0:
            _check_tree(fast)
    for h in chains:
        assert fast.lookup(h, len(h) * 16) == ref.lookup(h, len(h) * 16)
