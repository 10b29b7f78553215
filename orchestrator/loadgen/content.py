"""What a prompt is made of, for prefix caching and prefix-aware routing: a chain of segments.

A segment is `tokens` tokens of deterministic content named by an integer `key`: a seeded text (a user
turn, a shared system prompt), an answer (keyed by its text), one 512-token block of a Mooncake trace
(keyed by its hash id). A segment always starts at offset 0 of its key's content, so a shorter segment
of the same key is a prefix of a longer one (a trace's partial last block). Two prompts share tokens
exactly where their segment chains agree; a `Content` node is one prompt (or prompt and answer): its
parent chain is everything before its own segment, so prompts built by appending (each turn of a
conversation extends the one before it) share nodes and the work done for them.

The simulator hashes a content per KV block as vLLM does (vllm/v1/core/kv_cache_utils.py,
`hash_block_tokens`: each full block's hash covers its parent block's hash and its own tokens;
docs.vllm.ai/en/latest/design/prefix_caching), without holding tokens: a block's tokens are named by
the spans `(key, first, end)` of the segments it covers, which is the same thing for content whose
tokens are a function of (key, position). Only full blocks get a hash; the tail stays unhashed.

Hashes are Python's `hash` of tuples of ints: deterministic across processes (no string hashing).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

#: The parent hash of a sequence's first block (vLLM seeds it with NONE_HASH; any constant will do).
ROOT_HASH = 0x5EED


def text_key(text: str) -> int:
    """A stable key for a segment named by its text (an answer returned by a server)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


#: What the simulated engine answers: one word per token (its server streams " tok" per token), so a
#: conversation's history holds the same words in virtual time and against the simulated server.
SIM_TOKEN_TEXT = " tok"


def sim_answer_text(tokens: int) -> str:
    return SIM_TOKEN_TEXT * tokens


@functools.lru_cache(maxsize=4096)
def sim_answer_key(tokens: int) -> int:
    """The segment key of the simulated engine's `tokens`-token answer (keyed by its text, as a
    served answer is)."""
    return text_key(sim_answer_text(tokens))


class _Blocks:
    """The full-block hashes of a content for one block size, plus the spans of its unfinished tail.

    `hashes` may be shared with descendants (a chain that only grows appends in place); only the first
    `count` entries belong to this node (a persistent vector: a second child that extends the same
    parent copies first)."""

    __slots__ = ("count", "hashes", "tail", "tail_tokens")

    def __init__(self, hashes: list[int], count: int, tail: tuple[tuple[int, int, int], ...],
                 tail_tokens: int) -> None:
        self.hashes, self.count, self.tail, self.tail_tokens = hashes, count, tail, tail_tokens


class Content:
    """One node of a segment chain: `parent`'s tokens, then `tokens` tokens of `key`.

    Not a frozen dataclass: each node memoizes its block hashes per block size (built once, shared by
    every prompt that extends it). Treat it as immutable: build new nodes with `then`."""

    __slots__ = ("_blocks", "_kids", "chain", "end", "key", "parent", "tokens")

    def __init__(self, parent: Content | None, key: int, tokens: int) -> None:
        if tokens < 1:
            raise ValueError("a segment holds at least one token")
        self.parent, self.key, self.tokens = parent, key, tokens
        self.end: int = (parent.end if parent is not None else 0) + tokens
        # The identity of the whole chain up to here: what prefix-aware routing compares.
        self.chain: int = hash((parent.chain if parent is not None else ROOT_HASH, key, tokens))
        self._blocks: dict[int, _Blocks] = {}
        self._kids: dict[tuple[int, int], Content] | None = None

    @staticmethod
    def of(segments: Sequence[tuple[int, int]], parent: Content | None = None) -> Content:
        """The chain of `segments` ((key, tokens), ...) after `parent`."""
        if not segments:
            raise ValueError("a content needs at least one segment")
        node = parent
        for key, tokens in segments:
            node = Content(node, key, tokens)
        assert node is not None
        return node

    def then(self, key: int, tokens: int) -> Content:
        """This content followed by `tokens` tokens of `key`: the same node every time it is asked for,
        so prompts that extend one another share their block hashes."""
        kids = self._kids
        if kids is None:
            kids = self._kids = {}
        node = kids.get((key, tokens))
        if node is None:
            node = kids[(key, tokens)] = Content(self, key, tokens)
        return node

    def nodes(self) -> list[Content]:
        """Root first."""
        out: list[Content] = []
        node: Content | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def segments(self) -> list[tuple[int, int]]:
        return [(n.key, n.tokens) for n in self.nodes()]

    def route(self) -> tuple[tuple[int, int], ...]:
        """(chain identity, tokens up to it) per node, root first: what a router can match on."""
        return tuple((n.chain, n.end) for n in self.nodes())

    def block_hashes(self, block_tokens: int) -> Sequence[int]:
        """The hash of every full `block_tokens`-token block, in order (len = end // block_tokens)."""
        b = self._blocks_for(block_tokens)
        return b.hashes if len(b.hashes) == b.count else b.hashes[: b.count]

    def block_spans(self, index: int, block_tokens: int) -> tuple[tuple[int, int, int], ...]:
        """The spans (key, first, end) that block `index` covers (the tail's, when it is not full)."""
        lo, hi = index * block_tokens, min((index + 1) * block_tokens, self.end)
        out: list[tuple[int, int, int]] = []
        start = 0
        for n in self.nodes():
            a, b = max(lo, start), min(hi, start + n.tokens)
            if a < b:
                out.append((n.key, a - start, b - start))
            start += n.tokens
            if start >= hi:
                break
        return tuple(out)

    def _blocks_for(self, size: int) -> _Blocks:
        memo = self._blocks.get(size)
        if memo is not None:
            return memo
        # Walk up to the nearest ancestor that has them (iterative: chains can be long), then down.
        todo: list[Content] = []
        node: Content | None = self
        while node is not None and size not in node._blocks:
            todo.append(node)
            node = node.parent
        base = node._blocks[size] if node is not None else _Blocks([], 0, (), 0)
        for n in reversed(todo):
            base = n._extend(base, size)
            n._blocks[size] = base
        return base

    def _extend(self, base: _Blocks, size: int) -> _Blocks:
        hashes = base.hashes if len(base.hashes) == base.count else base.hashes[: base.count]
        parent = hashes[-1] if hashes else ROOT_HASH
        key, pos, left = self.key, 0, self.tokens
        tail, tail_tokens = base.tail, base.tail_tokens
        if tail_tokens:  # finish the block the parent left open
            take = min(size - tail_tokens, left)
            tail, tail_tokens = (*tail, (key, 0, take)), tail_tokens + take
            pos, left = take, left - take
            if tail_tokens < size:
                return _Blocks(hashes, len(hashes), tail, tail_tokens)
            parent = hash((parent, tail))
            hashes.append(parent)
            tail, tail_tokens = (), 0
        append = hashes.append
        while left >= size:  # whole blocks inside this segment: one span each
            parent = hash((parent, ((key, pos, pos + size),)))
            append(parent)
            pos, left = pos + size, left - size
        if left:
            tail, tail_tokens = ((key, pos, pos + left),), left
        return _Blocks(hashes, len(hashes), tail, tail_tokens)
