"""A corpus of bad and hostile inputs, each run through the real CLI (validate, plan, compile): every one
ends in one plain line on stderr with exit code 2, naming what is wrong; none is a traceback, a hang or
silently accepted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BASE = {
    "model": "{name: qwen2.5-7b}",
    "hardware": "{gpu: h100-sxm}",
    "workload": "{rates_per_s: [1], num_requests: 5}",
    "layouts": "[tp1]",
}


def spec(**sections: str) -> str:
    """A small valid spec with some sections replaced or added (values are YAML flow text)."""
    merged = BASE | sections
    return "".join(f"{k}: {v}\n" for k, v in merged.items())


def wl(extra: str) -> str:
    return "{rates_per_s: [1], num_requests: 5, " + extra + "}"


def sharegpt(path: str) -> str:
    return f"{{kind: sharegpt, dataset_path: '{path}', rates_per_s: [1], num_requests: 1}}"


def eng(extra: str) -> str:
    return "{" + extra + "}"


BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
    )
)

# (id, spec text, expected fragment of the one-line message)
SPEC_CASES: list[tuple[str, str, str]] = [
    ("nan-duration", spec(workload="{rates_per_s: [1], duration_s: .nan}"), "finite number"),
    ("inf-rate", spec(workload="{rates_per_s: [.inf], num_requests: 5}"), "finite number"),
    ("nan-gpu-util", spec(engine=eng("gpu_memory_utilization: .nan")), "finite number"),
    ("nan-override", spec(hardware="{gpu: h100-sxm, overrides: {hbm_bytes_per_s: .nan}}"), "finite number"),
    ("inf-slo", spec(slo="{ttft_p99_ms: .inf}"), "finite number"),
    ("huge-duration", spec(workload="{rates_per_s: [1], duration_s: 1e12}"), "less than or equal to 604800"),
    ("huge-input", spec(workload=wl("input_tokens: 1000000000")), "less than or equal to 10000000"),
    ("huge-dist-mean", spec(workload=wl("output_tokens: {kind: fixed, mean: 1e9}")), "less than or equal"),
    ("huge-requests", spec(workload="{rates_per_s: [1], num_requests: 1e12}"), "num_requests"),
    ("negative-seed", spec(workload=wl("seed: -1")), "greater than or equal to 0"),
    ("negative-count", spec(workload="{rates_per_s: [1], num_requests: -5}"), "greater than 0"),
    ("negative-concurrency", spec(workload=wl("max_concurrency: -1")), "greater than 0"),
    ("zero-time-scale", spec(engine=eng("time_scale: 1e-300")), "greater than or equal to 0.001"),
    ("port-too-high", spec(target="{kind: local, base_port: 70000}"), "less than or equal to 65525"),
    ("warmup-gt-duration", spec(workload="{rates_per_s: [1], duration_s: 10, warmup_s: 20}"),
     "warmup_s (20) must be shorter"),
    ("warmup-gt-requests", spec(workload="{rates_per_s: [1, 10], num_requests: 20, warmup_s: 5}"),
     "the shortest lasts about 2 s"),
    ("requests-per-point", spec(workload="{rates_per_s: [1000000], duration_s: 604800}"),
     "requests per load point, more than 10,000,000"),
    ("longer-than-context", spec(model="{name: qwen2.5-7b, max_model_len: 512}"),
     "requests of up to 1,280 tokens (prompt and output) exceed model.max_model_len of 512"),
    ("huge-reserve", spec(engine=eng("runtime_reserve_bytes: 1e300")),
     "less than or equal to 10000000000000"),
    ("huge-sigma", spec(model="{name: mixtral-8x7b, expert_popularity_sigma: 1e300}"),
     "less than or equal to 10"),
    ("dataset-directory", spec(workload=sharegpt("/")),
     "workload.dataset_path: /: not a regular file"),
    ("env-empty-key", spec(engine=eng("env: {'': x}")), "is not a variable name"),
    ("env-odd-key", spec(engine=eng("env: {'A;touch /tmp/pwned': x}")), "is not a variable name"),
    ("env-digit-key", spec(engine=eng("env: {1A: x}")), "is not a variable name"),
    ("env-token-name", spec(engine=eng("env: {HF_TOKEN: abc}")), "use engine.env_from_secret"),
    ("env-api-key-name", spec(engine=eng("env: {OPENAI_API_KEY: abc}")), "use engine.env_from_secret"),
    ("env-password-name", spec(engine=eng("env: {DB_PASSWORD: abc}")), "use engine.env_from_secret"),
    ("env-token-value", spec(engine=eng("env: {MY_VAR: hf_abcdefghijklmnopqrstuvwxyz}")), "env_from_secret"),
    ("extra-args-api-key", spec(engine=eng("extra_args: [--api-key, abc]")), "env_from_secret"),
    ("secret-ref-bad-env", spec(engine=eng("env_from_secret: {HF_TOKEN: {env: 'a b'}}")),
     "is not a variable name"),
    ("secret-ref-bad-name", spec(engine=eng("env_from_secret: {'X-Y': {}}")), "is not a variable name"),
    ("secret-ref-bad-secret", spec(engine=eng("env_from_secret: {HF_TOKEN: {secret: 'Bad_Name'}}")),
     "a Secret name is lowercase"),
    ("secret-ref-twice", spec(engine=eng("env: {A: '1'}, env_from_secret: {A: {}}")), "keep one"),
    ("secret-ref-k8s-no-secret",
     spec(engine=eng("env_from_secret: {HF_TOKEN: {}}"), target="{kind: kubernetes, image: img}"),
     "needs 'secret'"),
    ("duplicate-top-key", spec() + "layouts: [tp2]\n", "key 'layouts' given twice (first at line 4)"),
    ("duplicate-nested-key", spec(workload="{rates_per_s: [1], rates_per_s: [2], num_requests: 5}"),
     "key 'rates_per_s' given twice"),
    ("alias-bomb", spec() + "metadata:\n" + "".join("  " + line + "\n" for line in BOMB.splitlines()),
     "alias bomb"),
    ("recursive-alias", spec(metadata="&a [*a]"), "refers to a value that contains it"),
    ("deep-nesting", spec(metadata="[" * 40 + "]" * 40), "nested more than 32 levels"),
    ("very-deep-nesting", spec(metadata="[" * 100_000 + "]" * 100_000), "nested more than 32 levels"),
    ("deep-through-aliases",
     spec() + "metadata:\n  a: &a " + "[" * 20 + "]" * 20 + "\n  b: " + "[" * 20 + "*a" + "]" * 20 + "\n",
     "once aliases are expanded"),
    ("complex-key", spec(metadata="{? [a, b] : c}"), "a key must be a plain name"),
    ("nul-in-string", spec(model='{name: "qwen2.5-7b\\0"}'), "contains a NUL character"),
    ("control-char", spec().replace("qwen2.5-7b", "qwen\x07"), "is not allowed in YAML"),
    ("metadata-binary", spec(metadata="{blob: !!binary aGVsbG8=}"), "binary data is not JSON"),
    ("metadata-set", spec(metadata="{tags: !!set {a, b}}"), "a set is not JSON"),
    ("metadata-nan", spec(metadata="{score: .nan}"), "not a finite number"),
    ("metadata-int-key", spec(metadata="{1: a}"), "key 1 is not a string"),
    ("metadata-token", spec(metadata="{note: hf_abcdefghijklmnopqrstuvwxyz}"), "looks like a credential"),
    ("ray-env-token", spec(target="{kind: ray, runtime_env: {env_vars: {HF_TOKEN: abc}}}"),
     "use engine.env_from_secret"),
    ("ray-env-odd-key", spec(target="{kind: ray, runtime_env: {env_vars: {'A B': abc}}}"),
     "is not a variable name"),
    ("unknown-model", spec(model="{name: qwen9-999b}"), "known: deepseek-v2-lite"),
    ("unknown-gpu", spec(hardware="{gpu: h900}"), "known: a100-sxm-80gb"),
    ("unknown-override", spec(hardware="{gpu: h100-sxm, overrides: {warp_speed: 2}}"), "warp_speed"),
    ("odd-host", spec(target="{kind: local, host: '127.0.0.1; touch /tmp/pwned'}"), "not a host name"),
    ("python-tag", spec(model="!!python/object/apply:os.system [id]"), "a spec holds plain YAML values only"),
    ("not-a-mapping", "- a\n- b\n", "must be a YAML mapping"),
    ("syntax", "model: {name: x\n", "YAML syntax error"),
    # issue 15's bad input: search bounds, tolerance, a cost without a currency, closed-loop fields
    ("zero-tolerance", spec(workload="{num_requests: 5, search: {tolerance_frac: 0}}"),
     "workload.search.tolerance_frac: must be greater than 0"),
    ("negative-tolerance", spec(workload="{num_requests: 5, search: {tolerance_frac: -0.1}}"),
     "workload.search.tolerance_frac: must be greater than 0"),
    ("start-above-bound",
     spec(workload="{num_requests: 5, search: {max_rate_per_s: 1, start_rate_per_s: 2}}"),
     "start_rate_per_s (2) must lie within [min_rate_per_s, max_rate_per_s] = [0.05, 1]"),
    ("bounds-reversed", spec(workload="{num_requests: 5, search: {min_rate_per_s: 5, max_rate_per_s: 2}}"),
     "min_rate_per_s (5) must be below max_rate_per_s (2)"),
    ("cost-no-currency", spec(cost_per_gpu_hour="2.5"), "cost_per_gpu_hour needs a currency"),
    ("closed-with-rates", spec(workload="{loop: closed, rates_per_s: [1], num_requests: 5}"),
     "rates_per_s is an open-loop grid; with loop: closed give concurrency"),
    ("open-with-concurrency", spec(workload="{concurrency: [4], num_requests: 5}"),
     "concurrency is a closed-loop grid"),
    ("closed-start-below-bound",
     spec(workload="{loop: closed, num_requests: 5, search: {min_concurrency: 8, start_concurrency: 2}}"),
     "start_concurrency (2) must lie within [min_concurrency, max_concurrency] = [8, 1024]"),
    ("closed-fractional", spec(workload="{loop: closed, concurrency: [2.5], num_requests: 5}"),
     "valid integer"),
    # issue 29's bad input
    ("long-model-name", spec(model="{name: " + "q" * 300 + "}"),
     "neither a catalog model nor a readable path (File name too long)"),
    ("max-below-min", spec(workload=wl("input_tokens: {kind: uniform, mean: 30, min: 50, max: 10}")),
     "workload.input_tokens: max (10) must be at least min (50)"),
    ("uniform-without-max", spec(workload=wl("input_tokens: {kind: uniform, mean: 30, min: 5}")),
     "workload.input_tokens: a uniform distribution needs 'max'"),
    ("duplicate-layout", spec(layouts="\n  - tp1\n  - tp2\n  - tp1"),
     ":7: layouts[2]: layout tp1 is listed twice (first as layouts[0]); keep one"),
    ("target-kind-typo", spec(target="{kind: locl}"),
     ":5: target.kind: 'locl' is not one of local, ray, kubernetes; did you mean 'local'?"),
    ("target-kind-missing", spec(target="{host: 127.0.0.1}"), "target: 'kind' is missing"),
    # the third hardening round's features (h-hostile4): settings grid, sessions, model configs
    ("grid-too-many-combinations",
     spec(engine=eng("max_num_seqs: [" + ",".join(str(i) for i in range(1, 41)) + "], "
                     "max_num_batched_tokens: [" + ",".join(str(2048 * i) for i in range(1, 11)) + "]")),
     "engine: the settings lists make 400 combinations (40 max_num_seqs x 10 max_num_batched_tokens), "
     "more than 256"),
    ("vllm-tokens-below-seqs", spec(engine=eng("name: vllm, max_num_seqs: 1024, max_num_batched_tokens: 64")),
     "engine.max_num_batched_tokens: 64 is below max_num_seqs 1024; vLLM refuses it"),
    ("sim-tokens-below-seqs", spec(engine=eng("max_num_seqs: 1024, max_num_batched_tokens: 64")),
     "engine.max_num_batched_tokens: 64 is below max_num_seqs 1024"),
    ("grid-one-combination-vllm-refuses",
     spec(engine=eng("name: vllm, max_num_seqs: [64, 1024], max_num_batched_tokens: [512, 8192]")),
     "engine.max_num_batched_tokens: in the combination max_num_seqs=1024 max_num_batched_tokens=512: 512 "
     "is below max_num_seqs 1024"),
    ("vllm-no-chunking-short-budget",
     spec(engine=eng("name: vllm, enable_chunked_prefill: false, max_num_batched_tokens: 2048")),
     "2048 is below max_model_len 32768 without chunked prefill"),
    ("conversation-turns-huge",
     spec(workload=wl("kind: conversation, conversation: {turns: 10000000}")),
     "workload.conversation: turns: 10,000,000 is more than 10,000"),
    ("agentic-fan-out-huge",
     spec(workload=wl("kind: agentic, agentic: {parallel_calls: 10000000}")),
     "workload.agentic: parallel_calls: 10,000,000 is more than 1,024"),
    ("agentic-rounds-dist-huge",
     spec(workload=wl("kind: agentic, agentic: {rounds: {kind: uniform, mean: 5, min: 1, max: 20000}}")),
     "rounds: 20,000 is more than 10,000"),
    ("agentic-first-call-beyond-context",
     spec(workload=wl("kind: agentic, agentic: {system_prompt_tokens: 40000}")),
     "workload.agentic.system_prompt_tokens: a session's first call needs at least 43,074 tokens"),
    ("conversation-first-turn-beyond-context",
     spec(model="{name: qwen2.5-7b, max_model_len: 4096}",
          workload=wl("kind: conversation, conversation: {first_input_tokens: 8000}")),
     "workload.conversation.first_input_tokens: a session's first call needs at least 8,"),
]

CLI_COMMANDS = [["validate"], ["plan"], ["compile", "--layout", "tp1"]]


def _run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
             ) -> tuple[int, str, str]:
    from orchestrator.cli import main

    monkeypatch.setattr(sys, "argv", ["orch", *args])
    code: int | str | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


def _assert_one_line(code: int, out: str, err: str, needle: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert needle in lines[0], err


@pytest.mark.parametrize("command", CLI_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(("text", "needle"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_bad_spec_is_one_line(
    text: str, needle: str, command: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = _run_cli([command[0], str(path), *command[1:]], monkeypatch, capsys)
    _assert_one_line(code, out, err, needle)
    assert str(path) in err  # the line names the file


def _big(p: Path) -> Path:
    p.write_text(spec() + "# " + "x" * (1 << 20) + "\n")
    return p


def _latin1(p: Path) -> Path:
    p.write_bytes(spec(metadata="{who: 'Jos\xe9'}").encode("latin-1"))
    return p


def _directory(p: Path) -> Path:
    p.mkdir()
    return p


def _missing(p: Path) -> Path:
    return p


FILE_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("too-large", _big, "more than the 1,048,576 allowed"),
    ("not-utf8", _latin1, ":5: not UTF-8 text (byte 0xe9"),
    ("directory", _directory, "a directory, not a regular file"),
    ("missing", _missing, "no such file"),
]


@pytest.mark.parametrize("command", CLI_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(("make", "needle"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_bad_file_is_one_line(
    make: Callable[[Path], Path], needle: str, command: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = make(tmp_path / "spec.yaml")
    code, out, err = _run_cli([command[0], str(path), *command[1:]], monkeypatch, capsys)
    _assert_one_line(code, out, err, needle)


@pytest.mark.parametrize("command", CLI_COMMANDS, ids=lambda c: c[0])
def test_fifo_does_not_hang(command: list[str], tmp_path: Path) -> None:
    # A FIFO nobody writes to blocks a plain open(); run in a subprocess so a regression fails, not hangs.
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    code = "from orchestrator.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code, command[0], str(fifo), *command[1:]],
                         capture_output=True, text=True, timeout=120, check=False)
    _assert_one_line(out.returncode, out.stdout, out.stderr, "a FIFO, not a regular file")


def test_config_path_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    path = tmp_path / "s.yaml"
    path.write_text(spec(model=f"{{config_path: '{fifo}'}}"))
    code = "from orchestrator.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code, "validate", str(path)],
                         capture_output=True, text=True, timeout=120, check=False)
    _assert_one_line(out.returncode, out.stdout, out.stderr, "model.config_path")


def test_dataset_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    path = tmp_path / "s.yaml"
    path.write_text(spec(workload=sharegpt(str(fifo))))
    code = "from orchestrator.cli import main; main()"
    for command in (["validate"], ["simulate"]):
        out = subprocess.run([sys.executable, "-c", code, *command, str(path)],
                             capture_output=True, text=True, timeout=120, check=False)
        _assert_one_line(out.returncode, out.stdout, out.stderr, "not a regular file")


def test_validate_reports_a_missing_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec(workload=sharegpt("/no/x.json")))
    _assert_one_line(*_run_cli(["validate", str(path)], monkeypatch, capsys), "/no/x.json: no such file")


def test_markup_in_path_and_value_prints_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "[bold]spec[red].yaml"
    path.write_text(spec(hardware="{gpu: '[red]h900[/]'}"))
    for command in CLI_COMMANDS:
        code, out, err = _run_cli([command[0], str(path), *command[1:]], monkeypatch, capsys)
        _assert_one_line(code, out, err, "[red]h900[/]")
        assert str(path) in err


@pytest.mark.parametrize(
    ("nodes", "needle"),
    [("a;touch /tmp/pwned,b", "not a host name"), ("node0,$(id)", "not a host name"),
     ("node0,-rf", "not a host name"), ("node0,x\ny", "not a host name")],
)
def test_compile_refuses_odd_node_names(
    nodes: str, needle: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec(model="{name: qwen2.5-72b}", hardware="{gpu: h100-sxm, nodes: 2}",
                         layouts="[tp8pp2]"))
    code, out, err = _run_cli(["compile", str(path), "--layout", "tp8pp2", "--nodes", nodes],
                              monkeypatch, capsys)
    _assert_one_line(code, out, err, needle)


def test_dates_in_metadata_become_iso_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.spec import load_spec, spec_hash

    path = tmp_path / "s.yaml"
    path.write_text(spec(metadata="{day: 2026-12-04, at: 2026-12-04T10:00:00Z, nested: [2026-01-02]}"))
    loaded = load_spec(path)
    assert loaded.metadata == {
        "day": "2026-12-04", "at": "2026-12-04T10:00:00+00:00", "nested": ["2026-01-02"]
    }
    spec_hash(loaded)  # JSON-able
    code, out, err = _run_cli(["validate", str(path)], monkeypatch, capsys)
    assert code == 0 and ": ok;" in out, err


def test_good_secret_ref_and_innocent_names_are_accepted(tmp_path: Path) -> None:
    from orchestrator.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text(spec(engine=eng(
        "env: {TOKENIZERS_PARALLELISM: 'false', VLLM_CPU_KVCACHE_SPACE: '1'}, "
        "extra_args: [--max-num-batched-tokens, '512', --tokenizer, t], "
        "env_from_secret: {HF_TOKEN: {env: ORCH_HF_TOKEN, secret: hf-token, key: token}}"
    )))
    loaded = load_spec(path)
    ref = loaded.engine.env_from_secret["HF_TOKEN"]
    assert (ref.env, ref.secret, ref.key) == ("ORCH_HF_TOKEN", "hf-token", "token")


@pytest.mark.parametrize("command", [["report"], ["promote"], ["sweep", "--resume"]], ids=lambda c: c[0])
def test_a_stored_spec_that_no_longer_validates_is_one_line(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run written by an older orch (or altered): its spec holds a literal HF_TOKEN, refused today.
    from orchestrator.store.db import Store

    db = tmp_path / "r.db"
    store = Store(db)
    old = {"model": {"name": "qwen2.5-7b"}, "hardware": {"gpu": "h100-sxm"}, "layouts": ["tp1"],
           "engine": {"env": {"HF_TOKEN": "x"}}, "workload": {"rates_per_s": [1], "num_requests": 5}}
    store.create_run(run_id="20260101-000000-abcdef", spec_path=None, spec_json=old, spec_hash="h",
                     engine="sim", engine_version=None, model="m", model_config_hash=None,
                     orch_version="0", hardware={}, metadata={})
    verdict = {"layout": "tp1", "passed": True, "reason": "winner"}
    store.finish_run("20260101-000000-abcdef", "done", {"winner": "tp1", "verdicts": [verdict]})
    store.close()
    args = [*command, "20260101-000000-abcdef", "--store", str(db)]
    if command[0] == "promote":
        args += ["--out", str(tmp_path / "out")]
    code, out, err = _run_cli(args, monkeypatch, capsys)
    _assert_one_line(code, out, err, "the stored spec no longer validates (engine.env")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--rates", "nan"], "must be a finite number"), (["--rates", "inf"], "must be a finite number"),
     (["--rates", "1e9"], "less than or equal to 1000000"),
     (["--num-requests", "100000000000"], "workload.num_requests: must be less than or equal to 10000000")],
)
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_command_line_overrides_keep_the_spec_bounds(
    command: str, flags: list[str], needle: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec())
    store = ["--store", str(tmp_path / "r.db"), "--workdir", str(tmp_path / "w")]
    extra = store if command == "sweep" else []
    code, out, err = _run_cli([command, str(path), *flags, *extra], monkeypatch, capsys)
    _assert_one_line(code, out, err, needle)
    assert not (tmp_path / "w").exists()  # refused before anything started


# Command-line flags (not a spec), issue 29: each through the real main(), one line, exit 2, nothing run.
FLAG_CASES: list[tuple[str, list[str], str]] = [
    ("bench-rate-nan", ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "nan",
                        "--num-requests", "2"], "--rate: 'nan' is not a finite number"),
    ("bench-search-max-nan", ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--search",
                              "--slo", "ttft_p99_ms=100", "--search-max", "nan", "--num-requests", "2"],
     "--search-max: nan must be a positive, finite number"),
    ("bench-negative-uniform", ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "1",
                                "--num-requests", "2", "--input-len", "uniform:-5-10"],
     "--input-len: 'uniform:-5-10': uniform takes MIN-MAX, two positive whole numbers"),
    ("bench-negative-stddev", ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "1",
                               "--num-requests", "2", "--output-len", "normal:512,-64"],
     "--output-len: 'normal:512,-64': stddev: Input should be greater than or equal to 0"),
    ("bench-idle-timeout-zero", ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "1",
                                 "--num-requests", "2", "--idle-timeout-s", "0"],
     "--idle-timeout-s: 0.0 must be a positive, finite number"),
    ("plan-prompt-zero", ["plan", "layouts/qwen72b.yaml", "--prompt", "0"],
     "--prompt 0: give a number of tokens from 1 to 10,000,000"),
    ("plan-context-huge", ["plan", "layouts/qwen72b.yaml", "--context", "100000000000"],
     "--context 100000000000: give a number of tokens"),
]


@pytest.mark.parametrize(("args", "needle"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_bad_flag_is_one_line(args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    _assert_one_line(*_run_cli(args, monkeypatch, capsys), needle)


def test_a_trace_line_with_nan_arrival_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 5}\n'
                     '{"arrival_s": NaN, "input_tokens": 5, "output_tokens": 5}\n')
    args = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--workload", "trace",
            "--dataset", str(trace)]
    needle = f"{trace}:2: timestamp nan must be a finite number"
    _assert_one_line(*_run_cli(args, monkeypatch, capsys), needle)


def test_validate_refuses_a_spec_whose_every_layout_the_planner_rejects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec(model="{name: qwen2.5-72b}", layouts="[tp1, tp2]"))
    code, out, err = _run_cli(["validate", str(path)], monkeypatch, capsys)
    _assert_one_line(code, out, err, ":4: layouts: the planner rejects every layout (tp1: weights")
    assert "ok" not in out
    # One rejected among fitting ones: ok, with a warning naming it.
    path.write_text(spec(model="{name: qwen2.5-72b}", hardware="{gpu: h100-sxm}", layouts="[tp1, tp4]"))
    code, out, err = _run_cli(["validate", str(path)], monkeypatch, capsys)
    assert code == 0 and ": ok;" in out, err
    assert "warning:" in err and "the planner rejects layout tp1:" in err


def _without_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    """This install as the README's default one (`.[dev]`): the kubernetes client does not import."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "kubernetes" else real(name, *a))
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # an import fails as if it were not installed


@pytest.mark.parametrize("args", [["gc"], ["gc", "--namespace", "llm"], ["validate", "SPEC"],
                                  ["sweep", "SPEC", "--store", "STORE"]], ids=lambda a: "-".join(a[:2]))
def test_the_k8s_extra_missing_is_one_line_naming_it(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _without_kubernetes(monkeypatch)
    path = tmp_path / "s.yaml"
    path.write_text(spec(target="{kind: kubernetes, image: 'reg/orch:1.0'}"))
    args = [str(path) if a == "SPEC" else str(tmp_path / "r.db") if a == "STORE" else a for a in args]
    code, out, err = _run_cli(args, monkeypatch, capsys)
    _assert_one_line(code, out, err, "needs the Kubernetes client (kubernetes is not installed): "
                                     "pip install 'orch[k8s]'")
