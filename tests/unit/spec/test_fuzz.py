"""Property: whatever a spec file holds, loading and checking it ends in a valid spec or one SpecError
line, never another exception (hypothesis puts random values at every field of a valid spec)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import SpecError
from orchestrator.pipeline.validate import check_spec
from orchestrator.spec.load import parse_spec_lines

BASE: dict[str, Any] = {
    "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
    "hardware": {"gpu": "h100-sxm", "nodes": 1},
    "engine": {"name": "sim", "env": {"A": "1"}, "extra_args": [], "time_scale": 0.5},
    "target": {"kind": "local", "host": "127.0.0.1", "base_port": 8000},
    "workload": {"input_tokens": 128, "output_tokens": 16, "rates_per_s": [1.0], "num_requests": 5,
                 "warmup_s": 0.0, "seed": 0},
    "slo": {"ttft_p99_ms": 1000.0},
    "layouts": ["tp1"],
    "metadata": {"eval_run_id": "x"},
}
PATHS = [(section, key) for section, body in BASE.items() if isinstance(body, dict) for key in body]
PATHS += [(section,) for section in BASE]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["tp8", "tp2x2", "h200", "qwen2.5-72b", "HF_TOKEN", "$(id)", "a\nb", "[bold]", "1e12"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _set(spec: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    target = spec
    for part in path[:-1]:
        target = target.setdefault(part, {}) if isinstance(target.get(part), dict) else target
    target[path[-1]] = value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_any_value_anywhere_is_a_spec_or_one_spec_error(changes: list[tuple[tuple[str, ...], Any]]) -> None:
    spec = yaml.safe_load(yaml.safe_dump(BASE))
    for path, value in changes:
        _set(spec, path, value)
    try:
        text = yaml.safe_dump(spec, allow_unicode=True)
    except yaml.YAMLError:
        return
    try:
        loaded = parse_spec_lines(text, "f.yaml")
        check_spec(loaded)
    except SpecError as exc:
        message = str(exc)
        assert message.startswith("f.yaml") and "\n" not in message.strip()
        return
    # Accepted: every number in it is finite and it is JSON for the store.
    dumped = loaded.spec.model_dump(mode="json")
    for leaf in _leaves(dumped):
        assert not (isinstance(leaf, float) and not math.isfinite(leaf))


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, list):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def test_a_key_with_a_line_break_still_gives_one_line() -> None:
    # Found by the fuzz test above: a key holding "\n" (and a NUL) printed its path over two lines.
    spec = yaml.safe_load(yaml.safe_dump(BASE))
    spec["model"]["name"] = {"\n": {"\x00": None}}
    text = yaml.safe_dump(spec, allow_unicode=True)
    with pytest.raises(SpecError) as exc:
        check_spec(parse_spec_lines(text, "f.yaml"))
    message = str(exc.value)
    assert message.startswith("f.yaml") and "\n" not in message.strip(), message
