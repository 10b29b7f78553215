import pytest

from orchestrator.disagg import parse_disagg
from orchestrator.kv_handover import KVShape, handover

GQA8 = KVShape(num_kv_heads=8, is_mla=False)  # Llama-3.1-70B, Qwen2.5-72B
MLA = KVShape(num_kv_heads=128, is_mla=True)  # DeepSeek-V3


def _check(engine: str, text: str, kv: KVShape = GQA8, **kw: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    pd = parse_disagg(text)
    got = handover(engine, pd.prefill, pd.decode, kv, **kw)
    return got.rejections, got.warnings


@pytest.mark.parametrize("text", ["p:tp4+d:tp4", "p:tp2+d:tp8", "p:tp8+d:tp2", "p:tp1x4+d:tp4",
                                  "p:tp4pp2+d:tp4", "p:tp4dp8ep+d:tp4dp80ep"])
def test_vllm_accepts(text: str) -> None:
    assert _check("vllm", text) == ((), ())


@pytest.mark.parametrize(
    ("text", "kv", "fragment"),
    [
        ("p:tp2+d:tp3", GQA8, "must divide one another"),
        ("p:tp4+d:tp6", GQA8, "TransferTopology.tp_ratio"),
        ("p:tp8+d:tp4", KVShape(num_kv_heads=4, is_mla=False), "replicates the 4 KV heads"),
        ("p:tp4+d:tp4pp2", GQA8, "decode pool cannot use PP"),
    ],
)
def test_vllm_rejects(text: str, kv: KVShape, fragment: str) -> None:
    rejections, _ = _check("vllm", text, kv)
    assert any(fragment in r for r in rejections), rejections


def test_vllm_mla_does_not_mind_replication() -> None:
    # MLA's latent is on every TP rank: a decode rank reads it from one prefill rank.
    assert _check("vllm", "p:tp8+d:tp4", KVShape(num_kv_heads=1, is_mla=True)) == ((), ())


def test_sim_follows_vllm() -> None:
    assert _check("sim", "p:tp4+d:tp4pp2") == _check("vllm", "p:tp4+d:tp4pp2")


def test_example_connector_needs_tp1() -> None:
    assert _check("vllm", "p:tp1+d:tp1", connector="ExampleConnector") == ((), ())
    rejections, _ = _check("vllm", "p:tp2+d:tp2", connector="ExampleConnector")
    assert any("TP 1 on both pools" in r for r in rejections)
    rejections, _ = _check("vllm", "p:tp2+d:tp2", connector="LMCacheConnectorV1")
    assert rejections and "NixlConnector or ExampleConnector" in rejections[0]


def test_sglang_rules() -> None:
    assert _check("sglang", "p:tp4+d:tp4") == ((), ())
    assert _check("sglang", "p:tp4dp8ep+d:tp4dp80ep", MLA) == ((), ())
    rejections, warnings = _check("sglang", "p:tp2+d:tp4")
    assert rejections == () and "NOT guaranteed" in warnings[0]
    assert _check("sglang", "p:tp2+d:tp4", MLA) == ((), ())
    assert any("divide one another" in r for r in _check("sglang", "p:tp2+d:tp3")[0])
    # decode PP equal to prefill PP or 1
    assert _check("sglang", "p:tp4pp2+d:tp4pp2")[0] == ()
    assert _check("sglang", "p:tp4pp2+d:tp4")[0] == ()
    assert any("decode PP 2 must equal prefill PP 1" in r for r in _check("sglang", "p:tp4+d:tp4pp2")[0])
    assert any("refuses transfer backend 'fake'" in r
               for r in _check("sglang", "p:tp4+d:tp4", connector="fake")[0])
    rejections, _ = _check("sglang", "p:tp4+d:tp4", connector="rdma")
    assert any("no transfer backend 'rdma'" in r for r in rejections)


def test_unknown_engine() -> None:
    rejections, _ = _check("trtllm", "p:tp4+d:tp4")
    assert "no prefill/decode disaggregation" in rejections[0]
