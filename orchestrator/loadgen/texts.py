"""Prompt text: deterministic words of about (or, with a tokenizer, exactly) a number of tokens.

Without a tokenizer, text is common English words, roughly one token per word in BPE vocabularies; the
simulated engine counts exactly one token per word, so its token counts match the words. With a local
Hugging Face tokenizer directory, text is decoded from token ids and re-encoded until it holds exactly
the asked number of tokens. A segment's text (loadgen/content.py) is seeded by its key alone, so the
same segment reads the same in every prompt that contains it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from orchestrator.errors import SpecError

# Short, common words: one token each (with their leading space) in GPT-2/Llama/Qwen-style BPEs.
_WORDS_TEXT = (
    "the of and to in is it you that he was for on are as with his they at be this have from or one "
    "had by word but not what all were we when your can said there use an each which she do how their "
    "if will up other about out many then them these so some her would make like him into time has "
    "look two more write go see number no way could people my than first water been call who oil its "
    "now find long down day did get come made may part over new sound take only little work know place "
    "year live me back give most very after thing our just name good sentence man think say great where "
    "help through much before line right too mean old any same tell boy follow came want show also "
    "around form three small set put end does another well large must big even such because turn here"
)
WORDS = tuple(_WORDS_TEXT.split())


class Tokenizer(Protocol):
    """What a workload needs from a tokenizer (a transformers tokenizer satisfies it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A local Hugging Face tokenizer directory; transformers is imported only here."""
    p = Path(path)
    if not p.is_dir():
        raise SpecError(f"--tokenizer: {str(p)!r} is not a directory; give a local tokenizer directory")
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SpecError(
            "--tokenizer needs the 'transformers' package (pip install transformers); "
            "or omit --tokenizer and take token counts from the server's usage"
        ) from None
    tok: Tokenizer = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    return tok


def words(n: int, rng: np.random.Generator) -> str:
    idx = rng.integers(0, len(WORDS), n)
    return " ".join(WORDS[i] for i in idx)


def _key_rng(key: int) -> np.random.Generator:
    return np.random.default_rng(key & ((1 << 63) - 1))


class PromptMaker:
    """Deterministic prompts of about / exactly n tokens (with a tokenizer: exactly, re-encoded)."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tok = tokenizer
        self._ids: list[int] = []
        self._word_ids: list[int] = []  # whole words with their leading space (" the"), as they read
        self._surface: dict[int, str] = {}
        if tokenizer is not None:
            ids = tokenizer.encode(" " + " ".join(WORDS), add_special_tokens=False)
            self._ids = list(dict.fromkeys(ids))
            # Tokens that are a space and a word, and read back as themselves: text made of them encodes
            # to exactly those tokens, alone or after any other such text (pre-tokenizers split at the
            # spaces, so nothing merges across them). The common words first; else any such token of
            # the vocabulary (a tiny test vocabulary has few whole words).
            vocab = getattr(tokenizer, "vocab_size", 0) or 0
            for i in [*ids, *range(int(vocab))]:
                if i in self._surface:
                    continue
                text = tokenizer.decode([i], skip_special_tokens=True)
                whole = re.fullmatch(r" [A-Za-z]+", text) is not None
                if whole and tokenizer.encode(text, add_special_tokens=False) == [i]:
                    self._surface[i] = text
                    if len(self._surface) >= 256:
                        break
            self._word_ids = list(self._surface)

    @property
    def word_token_ids(self) -> list[int]:
        """With a tokenizer: the ids of whole words with their leading space; text made of them reads
        back as the same ids (a model restricted to them answers in text that re-encodes exactly)."""
        return list(self._word_ids)

    def text(self, n: int, rng: np.random.Generator) -> tuple[str, int | None]:
        if self.tok is None:
            return words(n, rng), None
        ids = [self._ids[i] for i in rng.integers(0, len(self._ids), n)]
        text = self.tok.decode(ids, skip_special_tokens=True)
        for _ in range(4):  # decode/encode may merge or split tokens: trim or pad until it is exact
            got = self.tok.encode(text, add_special_tokens=False)
            if len(got) == n:
                break
            if len(got) > n:
                got = got[:n]
            else:
                got = got + [self._ids[i] for i in rng.integers(0, len(self._ids), n - len(got))]
            text = self.tok.decode(got, skip_special_tokens=True)
        return text, len(self.tok.encode(text, add_special_tokens=False))

    def segment(self, key: int, n: int) -> str:
        """The text of segment `key`, `n` tokens long and starting with a space (so segments join at a
        word boundary): the same wherever the segment appears, and a shorter segment of a key is the
        start of a longer one. With a tokenizer, whole-word tokens only: the text encodes to exactly n
        tokens, alone or after another segment."""
        rng = _key_rng(key)
        if self.tok is None:
            return " " + words(n, rng)
        if not self._word_ids:
            raise SpecError("the tokenizer has no tokens of a space and a word: session prompts cannot be "
                            "built to exact token counts with it; leave out --tokenizer")
        surface = self._surface
        return "".join(surface[self._word_ids[i]] for i in rng.integers(0, len(self._word_ids), n))

    def count(self, text: str) -> int | None:
        return None if self.tok is None else len(self.tok.encode(text, add_special_tokens=False))
