
import pytest

from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.spec import SweepSpec, load_spec, parse_spec, spec_hash, spec_json_schema
from tests.support.paths import ROOT

BASE = (
    "model: {name: qwen2.5-72b}\nhardware: {gpu: h100-sxm}\n"
    "workload: {rates_per_s: [1], num_requests: 5}\n"
)


def _err(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "f.yaml")
    return str(info.value)


def test_example_spec_loads() -> None:
    spec = load_spec(ROOT / "layouts" / "qwen72b.yaml")
    assert spec.layouts == [Layout(tp=8), Layout(tp=4, replicas=2), Layout(tp=2, replicas=4)]
    assert spec.hardware.gpu == "h100-sxm" and spec.hardware.nodes == 1
    assert spec.slo.bounds_ms() == {("ttft", "p99"): 2000.0, ("itl", "p99"): 100.0}
    assert spec.metadata["eval_run_id"] == "example-0001"


def test_round_trip_and_hash() -> None:
    spec = load_spec(ROOT / "layouts" / "qwen72b.yaml")
    dumped = spec.model_dump(mode="json")
    assert dumped["layouts"] == ["tp8", "tp4x2", "tp2x4"]
    again = SweepSpec.model_validate(dumped)
    assert again == spec and spec_hash(again) == spec_hash(spec)
    other = parse_spec(BASE + "layouts: [tp8]\n")
    assert spec_hash(other) != spec_hash(spec)


def test_unknown_field_names_line_and_suggests() -> None:
    msg = _err(BASE.replace("num_requests: 5", "num_requests: 5, input_tokns: 9") + "layouts: [tp8]\n")
    assert msg == "f.yaml:3: workload.input_tokns: unknown field; did you mean 'input_tokens'?"
    msg = _err(BASE + "target: {kind: ray, adress: x}\nlayouts: [tp8]\n")
    assert msg == "f.yaml:4: target.adress: unknown field; did you mean 'address'?"


def test_bad_values_name_path_and_line() -> None:
    assert _err(BASE.replace("{gpu: h100-sxm}", "{gpu: h100-sxm, nodes: 0}") + "layouts: [tp8]\n") == (
        "f.yaml:2: hardware.nodes: must be greater than 0"
    )
    assert _err(BASE + "layouts: [tp8]\nslo:\n  ttft_p99_ms: -5\n").startswith("f.yaml:6: slo.ttft_p99_ms:")
    assert "must be greater than 0" in _err(
        BASE.replace("num_requests: 5", "num_requests: 5, input_tokens: {kind: normal, mean: -1}")
        + "layouts: [tp8]\n"
    )


def test_bad_layout_and_duplicates() -> None:
    msg = _err(BASE + "layouts:\n  - tp8\n  - tp3x\n")
    assert msg.startswith("f.yaml:6: layouts[1]: layout 'tp3x'")
    assert "listed twice" in _err(BASE + "layouts: [tp8, tp8]\n")


def test_missing_section_and_syntax_and_file() -> None:
    assert _err("model: {name: x}\nhardware: {gpu: h100}\nlayouts: [tp8]\n") == (
        "f.yaml:1: workload: required field is missing"
    )
    assert _err("model: {name: x\nhardware: 1\n").startswith("f.yaml:2: YAML syntax error")
    assert "must be a YAML mapping" in _err("- 1\n- 2\n")
    with pytest.raises(SpecError, match="no such file"):
        load_spec("does/not/exist.yaml")


def test_model_needs_exactly_one_source() -> None:
    text = BASE.replace("{name: qwen2.5-72b}", "{name: a, config_path: b}") + "layouts: [tp8]\n"
    assert "exactly one of 'name'" in _err(text)


def test_schema_is_json_schema() -> None:
    schema = spec_json_schema()
    assert schema["type"] == "object"
    assert {"model", "hardware", "workload", "layouts", "slo", "metadata"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
