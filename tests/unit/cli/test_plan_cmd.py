import json
from pathlib import Path

from tests.support.cli import Orch
from tests.support.paths import ROOT

SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def test_plan_json_carries_every_number_and_its_parts(orch: Orch) -> None:
    out = orch("plan", SPEC, "--json", "--batch", "1,64")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["layout"]: r for r in data["rows"]}
    assert {"tp8", "tp4x2", "tp2x4"} <= set(rows)  # the spec's candidates among the enumerated ones
    assert data["kv_bytes_per_token"] == 327_680
    tp8 = rows["tp8"]
    assert tp8["fits"] and [d["batch"] for d in tp8["decode"]] == [1, 64]
    parts = tp8["decode"][0]["parts"]
    assert parts["bound"] == "memory"
    summed = (parts["weight_read_ms"] + parts["kv_read_ms"] + parts["tp_comm_ms"] + parts["pp_comm_ms"]
              + parts["overhead_ms"])
    assert abs(parts["total_ms"] - summed) < 1e-9
    # 72B in bf16 over 2 GPUs leaves too little of 80 GiB for one 8192-token request (vLLM's start check)
    assert not rows["tp2x4"]["fits"] and "less than max_model_len" in rows["tp2x4"]["rejected_because"][0]
    assert data["assumptions"]["runtime_reserve_bytes"] == 2e9  # plan/assumptions.py default
    # Ranked: the first row fits and has the highest predicted tokens/s per GPU.
    fitting = [r for r in data["rows"] if r["best"]]
    assert data["rows"][0]["layout"] == fitting[0]["layout"]
    tps = [r["best"]["output_tokens_per_s_per_gpu"] for r in fitting]
    assert tps == sorted(tps, reverse=True)


def test_the_parts_table_names_every_part_of_the_step(orch: Orch) -> None:
    # memory-bound dense decode: step = weights + KV + comm + fixed, each cell as printed (2 decimals)
    out = orch("plan", SPEC, "--layouts", "tp8,tp4pp2", "--batch", "1", "--wide")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("decode step parts"))
    cols = [c.strip() for c in lines[head + 2].split("┃")[1:-1]]
    assert cols[:10] == ["layout", "batch", "weights", "KV", "compute", "TP comm", "EP comm", "PP comm",
                         "fixed", "step"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in lines[head + 4:head + 6]]
    for row in rows:
        weights, kv, tp, ep, pp, fixed, step = (float(row[i]) for i in (2, 3, 5, 6, 7, 8, 9))
        assert fixed > 0, row  # the step overhead and 80 layers' floor are not hidden in "step"
        assert abs(weights + kv + tp + ep + pp + fixed - step) <= 0.03, row  # rounding of 6 cells


def test_plan_table_and_spec_layouts_only(orch: Orch) -> None:
    out = orch("plan", SPEC, "--layouts", "spec")
    assert out.returncode == 0, out.stderr
    assert "tp4x2" in out.stdout and "pp8" not in out.stdout
    assert "rejected:" in out.stdout and "assumptions" in out.stdout


def test_plan_bad_input_is_one_line_exit_2(tmp_path: Path, orch: Orch) -> None:
    bad_batch = orch("plan", SPEC, "--batch", "1,x")
    assert bad_batch.returncode == 2 and "--batch" in bad_batch.stderr
    assert "Traceback" not in bad_batch.stderr
    bad_layout = orch("plan", SPEC, "--layouts", "tp3x")
    assert bad_layout.returncode == 2 and "Traceback" not in bad_layout.stderr
    spec = tmp_path / "s.yaml"
    spec.write_text(Path(SPEC).read_text().replace("qwen2.5-72b", "qwen-9000"))
    unknown = orch("plan", str(spec))
    assert unknown.returncode == 2 and "qwen-9000" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


DEEPSEEK = str(ROOT / "layouts" / "deepseek-v3.yaml")


def test_plan_rejects_a_layout_its_spec_cannot_serve_and_plans_the_rest(orch: Orch) -> None:
    # 32 redundant expert slots cannot be spread over a single EP rank (epx32): that one layout is
    # rejected with the reason; the enumeration goes on and --json prints every row.
    out = orch("plan", DEEPSEEK, "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["layout"]: r for r in json.loads(out.stdout)["rows"]}
    assert not rows["epx32"]["fits"]
    assert "redundant experts need 288 slots per rank" in rows["epx32"]["rejected_because"][0]
    assert any(r["fits"] for r in rows.values()) and {"dp32ep", "tp8x4"} <= set(rows)
    table = orch("plan", DEEPSEEK)
    assert table.returncode == 0, table.stderr
    assert "epx32: rejected: 32 redundant experts" in table.stdout


def test_plan_warning_names_the_limit_that_binds_the_batch(orch: Orch) -> None:
    # deepseek-v3.yaml sets max_num_seqs 128; dp32ep's KV cache holds far more sequences than that.
    out = orch("plan", DEEPSEEK, "--layouts", "dp32ep", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    capped = [w for w in row["warnings"] if "sequences" in w]
    assert len(capped) == 1 and capped[0].startswith("max_num_seqs 128 caps the batch at 128"), capped
    assert row["max_batch"] == 128
    # Where the KV cache is what binds, the warning says so (tp8 of Qwen-72B at a long context).
    kv = orch("plan", SPEC, "--layouts", "tp4x2", "--context", "30000", "--json")
    assert kv.returncode == 0, kv.stderr
    (row,) = json.loads(kv.stdout)["rows"]
    held = [w for w in row["warnings"] if "sequences" in w]
    assert len(held) == 1 and "the KV cache holds only" in held[0] and "(max_num_seqs 256)" in held[0], held


def test_plan_of_only_rejected_layouts_shows_the_reasons_without_an_empty_parts_table(orch: Orch) -> None:
    out = orch("plan", SPEC, "--layouts", "tp3,tp8x9")
    assert out.returncode == 0, out.stderr
    assert "decode step parts" not in out.stdout
    assert "tp3: rejected: TP 3 does not divide the 64 attention heads" in out.stdout
    assert "tp8x9: rejected: needs 72 GPUs" in out.stdout
    both = orch("plan", SPEC, "--layouts", "tp3,tp8")
    assert both.returncode == 0 and "decode step parts" in both.stdout
