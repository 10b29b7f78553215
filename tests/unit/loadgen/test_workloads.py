import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import SpecError
from orchestrator.loadgen.texts import load_tokenizer
from orchestrator.loadgen.workloads import (
    parse_length,
    prefix_workload,
    random_workload,
    sample_lengths,
    sharegpt_workload,
    trace_workload,
)
from orchestrator.spec.workload import TokenDistribution


class WordTokenizer:
    """One token per whitespace-separated word; a stand-in for a HF tokenizer."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inv: dict[int, str] = {}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        out = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab)
                self.inv[self.vocab[w]] = w
            out.append(self.vocab[w])
        return out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(self.inv[i] for i in ids)


def test_parse_length_forms_and_errors() -> None:
    assert parse_length("512") == 512
    u = parse_length("uniform:128-1024")
    assert isinstance(u, TokenDistribution) and (u.kind, u.min, u.max) == ("uniform", 128, 1024)
    n = parse_length("normal:512,64")
    assert isinstance(n, TokenDistribution) and n.stddev == 64 and n.max is None
    ln = parse_length("lognormal:300,100,10,900", "--output-len")
    assert isinstance(ln, TokenDistribution) and (ln.min, ln.max) == (10, 900)
    for bad in ("abc", "uniform:5", "normal:1", "0", "uniform:10-5"):
        with pytest.raises(SpecError) as exc:
            parse_length(bad, "--input-len")
        assert "--input-len" in str(exc.value)


def test_sample_lengths_moments_and_bounds() -> None:
    rng = np.random.default_rng(3)
    assert sample_lengths(7, 4, rng) == [7, 7, 7, 7]
    assert sample_lengths(TokenDistribution(kind="fixed", mean=9.6), 2, rng) == [10, 10]
    u = sample_lengths(TokenDistribution(kind="uniform", mean=15, min=10, max=20), 4000, rng)
    assert min(u) == 10 and max(u) == 20 and abs(statistics.mean(u) - 15) < 0.3
    nrm = sample_lengths(TokenDistribution(kind="normal", mean=500, stddev=50), 4000, rng)
    assert abs(statistics.mean(nrm) - 500) < 5 and abs(statistics.stdev(nrm) - 50) < 4
    # lognormal: mean and stddev of the lengths themselves
    lg = sample_lengths(TokenDistribution(kind="lognormal", mean=400, stddev=200), 20000, rng)
    assert abs(statistics.mean(lg) - 400) < 10 and abs(statistics.stdev(lg) - 200) < 15
    d = TokenDistribution(kind="normal", mean=100, stddev=80, min=50, max=120)
    clipped = sample_lengths(d, 2000, rng)
    assert min(clipped) == 50 and max(clipped) == 120


def test_random_workload_seeded_without_tokenizer() -> None:
    a = random_workload(20, TokenDistribution(kind="uniform", mean=60, min=20, max=100), 32, seed=5)
    b = random_workload(20, TokenDistribution(kind="uniform", mean=60, min=20, max=100), 32, seed=5)
    c = random_workload(20, 50, 32, seed=6)
    assert a == b and a.specs != c.specs
    assert a.token_counts == "server" and a.offsets_s is None
    assert all(s.prompt_tokens is None and s.max_tokens == 32 for s in a.specs)
    assert len({s.request_id for s in a.specs}) == 20
    words = [len(s.prompt.split()) for s in a.specs]
    assert min(words) >= 20 and max(words) <= 100 and len(set(words)) > 5
    assert len({s.prompt for s in c.specs}) == 20  # distinct prompts: no accidental prefix sharing


def test_random_workload_with_tokenizer_exact_counts() -> None:
    tok = WordTokenizer()
    w = random_workload(10, TokenDistribution(kind="normal", mean=40, stddev=10), 8, seed=1, tokenizer=tok)
    assert w.token_counts == "tokenizer"
    for s in w.specs:
        assert s.prompt_tokens == len(tok.encode(s.prompt))


def test_prefix_workload_shares_prefixes() -> None:
    tok = WordTokenizer()
    w = prefix_workload(9, 30, 10, 4, num_prefixes=3, seed=2, tokenizer=tok)
    heads = [s.prompt.split("\n")[0] for s in w.specs]
    assert len(set(heads)) == 3 and heads[0] == heads[3] == heads[6] and heads[0] != heads[1]
    assert all(len(h.split()) == 30 for h in heads)
    assert len({s.prompt for s in w.specs}) == 9
    assert all(s.prompt_tokens == 40 for s in w.specs)
    with pytest.raises(SpecError):
        prefix_workload(2, 0, 10, 4)


def test_sharegpt(tmp_path: Path) -> None:
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "hello there"},
                                      {"from": "gpt", "value": "x" * 40}]},
        {"id": "b", "conversations": [{"from": "human", "value": "only one turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "second prompt"},
                                      {"from": "gpt", "value": "one two three four five"}]},
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    w = sharegpt_workload(f, 4, seed=0)
    assert {s.prompt for s in w.specs} == {"hello there", "second prompt"}
    by_prompt = {s.prompt: s.max_tokens for s in w.specs}
    assert by_prompt["hello there"] == 10  # 40 chars / 4 without a tokenizer
    wt = sharegpt_workload(f, 2, seed=0, tokenizer=WordTokenizer())
    assert {s.prompt: s.max_tokens for s in wt.specs}["second prompt"] == 5
    assert all(s.max_tokens == 3 for s in sharegpt_workload(f, 3, output_len=3).specs)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(SpecError, match="not valid JSON"):
        sharegpt_workload(bad, 1)
    with pytest.raises(SpecError, match="cannot read"):
        sharegpt_workload(tmp_path / "missing.json", 1)
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(SpecError, match="no ShareGPT"):
        sharegpt_workload(empty, 1)


def test_trace(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"arrival_s": 10.0, "input_tokens": 5, "output_tokens": 7}\n\n'
        '{"arrival_s": 10.5, "input_tokens": 20, "output_tokens": 3}\n'
        '{"arrival_s": 12.0, "input_tokens": 8, "output_tokens": 1}\n'
    )
    w = trace_workload(f)
    assert w.offsets_s == pytest.approx((0.0, 0.5, 2.0))
    assert [s.max_tokens for s in w.specs] == [7, 3, 1]
    assert [len(s.prompt.split()) for s in w.specs] == [5, 20, 8]
    assert len(trace_workload(f, n=2).specs) == 2
    unsorted = tmp_path / "u.jsonl"  # a trace's order is its arrival order: refused, not sorted
    unsorted.write_text(f.read_text().replace('"arrival_s": 10.0', '"arrival_s": 11.0'))
    with pytest.raises(SpecError, match=r"u.jsonl:3: timestamp 10.5 comes before line 1's 11"):
        trace_workload(unsorted)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 7}\n{"arrival_s": 1}\n')
    with pytest.raises(SpecError, match=r"b.jsonl:2"):
        trace_workload(bad)


def test_tokenizer_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not a directory"):
        load_tokenizer(tmp_path / "nope")
    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(SpecError, match="transformers"):
            load_tokenizer(tmp_path)


def test_cli_sharegpt_honours_output_len(tmp_path: Path) -> None:
    """`orch bench --workload sharegpt --output-len N` forces N; without it the reply's length counts."""
    from orchestrator.cli.bench_cmd import _workload_factory

    data = [{"id": "a", "conversations": [{"from": "human", "value": "hello there"},
                                          {"from": "gpt", "value": "x" * 40}]}]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    forced = _workload_factory("sharegpt", "1024", "7", 512, 1, str(f), None, 0)(3)
    assert [s.max_tokens for s in forced.specs] == [7, 7, 7]
    natural = _workload_factory("sharegpt", "1024", None, 512, 1, str(f), None, 0)(2)
    assert [s.max_tokens for s in natural.specs] == [10, 10]
    randoms = _workload_factory("random", "16", None, 512, 1, None, None, 0)(2)
    assert [s.max_tokens for s in randoms.specs] == [128, 128]
