import json

from tests.support.cli import Orch


def test_experts_placement_and_curve(orch: Orch) -> None:
    out = orch(
        "experts",
        "--model",
        "deepseek-v3",
        "--layout",
        "dp8ep",
        "--redundant",
        "8",
        "--batch",
        "1,4096",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["imbalance_after"] < d["imbalance_before"] and d["slots_per_rank"] == 33
    assert sorted(e for r in d["ranks"] for e in r["experts"])[:3] == [0, 1, 2]
    assert sum(len(r["experts"]) for r in d["ranks"]) == 256 + 8
    small, large = d["curve"]
    assert small["imbalance_before"] > large["imbalance_before"]  # small batches are lumpier
    assert large["touched_fraction"] > 0.999
    assert '{"num_redundant_experts": 8}' in d["vllm_flags"]


def test_experts_bad_input(orch: Orch) -> None:
    dense = orch("experts", "--model", "qwen2.5-72b")
    assert dense.returncode == 2 and "dense model" in dense.stderr
    uneven = orch("experts", "--layout", "dp8ep", "--redundant", "5")
    assert uneven.returncode == 2 and "multiple of the 8 EP ranks" in uneven.stderr
