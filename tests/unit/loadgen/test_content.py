"""Segment chains and their block hashes: blocks agree exactly where the tokens do."""

from __future__ import annotations

import pytest

from orchestrator.loadgen.content import Content, sim_answer_key, sim_answer_text, text_key


def _tokens(c: Content) -> list[tuple[int, int]]:
    """The content token by token, as (key, position in its segment): what the hashes stand for."""
    return [(key, i) for key, n in c.segments() for i in range(n)]


def test_blocks_match_exactly_where_the_tokens_match() -> None:
    base = Content.of([(1, 40), (2, 25)])
    a = base.then(3, 30)
    b = base.then(4, 30)
    for size in (16, 7, 64):
        ha, hb = a.block_hashes(size), b.block_hashes(size)
        assert len(ha) == a.end // size and len(hb) == b.end // size
        ta, tb = _tokens(a), _tokens(b)
        for i in range(min(len(ha), len(hb))):
            same = ta[: (i + 1) * size] == tb[: (i + 1) * size]
            assert (ha[i] == hb[i]) == same, (size, i)


def test_the_same_chain_built_twice_hashes_the_same_and_a_child_extends_its_parent() -> None:
    a = Content.of([(7, 100), (8, 33)])
    b = Content.of([(7, 100), (8, 33)])
    assert list(a.block_hashes(16)) == list(b.block_hashes(16)) and a.chain == b.chain
    child = a.then(9, 50)
    assert list(child.block_hashes(16))[: len(a.block_hashes(16))] == list(a.block_hashes(16))
    # a second child of the same parent must not see the first one's blocks
    other = a.then(10, 50)
    assert list(other.block_hashes(16))[:8] == list(a.block_hashes(16))
    assert child.block_hashes(16)[8] != other.block_hashes(16)[8]
    assert len(a.block_hashes(16)) == 133 // 16


def test_a_shorter_segment_of_a_key_is_a_prefix_of_the_longer() -> None:
    # a trace's partial last block: the first 300 tokens of hash id 5 are those of its full block
    full, part = Content.of([(4, 512), (5, 512)]), Content.of([(4, 512), (5, 300)])
    assert list(part.block_hashes(16)) == list(full.block_hashes(16))[: 812 // 16]


def test_spans_name_the_tokens_of_a_block() -> None:
    c = Content.of([(1, 10), (2, 10)])
    assert c.block_spans(0, 16) == ((1, 0, 10), (2, 0, 6))
    assert c.block_spans(1, 16) == ((2, 6, 10),)  # the unfinished tail
    assert c.route() == ((c.parent.chain, 10), (c.chain, 20))  # type: ignore[union-attr]


def test_answers_are_keyed_by_their_text() -> None:
    assert sim_answer_key(5) == text_key(sim_answer_text(5)) != sim_answer_key(6)
    assert len(sim_answer_text(5).split()) == 5
    with pytest.raises(ValueError):
        Content(None, 1, 0)
