import pytest

from orchestrator.disagg import (
    DisaggLayout,
    one_node,
    parse_any_layout,
    parse_any_layouts,
    parse_disagg,
    pool_problems,
)
from orchestrator.errors import SpecError
from orchestrator.layout import Layout


@pytest.mark.parametrize(
    ("text", "prefill", "decode", "gpus"),
    [
        ("p:tp4+d:tp4", Layout(tp=4), Layout(tp=4), 8),
        ("p:tp2x2+d:tp4", Layout(tp=2, replicas=2), Layout(tp=4), 8),
        ("p:tp4dp8ep+d:tp4dp80ep", Layout(tp=4, dp=8, ep=True), Layout(tp=4, dp=80, ep=True), 352),
        ("d:tp8 + p:tp1x4", Layout(tp=1, replicas=4), Layout(tp=8), 12),
        ("P:TP2+D:TP2X3", Layout(tp=2), Layout(tp=2, replicas=3), 8),
    ],
)
def test_parse(text: str, prefill: Layout, decode: Layout, gpus: int) -> None:
    pd = parse_disagg(text)
    assert (pd.prefill, pd.decode) == (prefill, decode)
    assert pd.gpus == gpus == prefill.gpus + decode.gpus


@pytest.mark.parametrize("text", ["p:tp4+d:tp4", "p:tp2x2+d:tp4", "p:tp4dp8ep+d:tp4dp80ep", "p:tp1+d:tp8pp2"])
def test_round_trip(text: str) -> None:
    pd = parse_disagg(text)
    assert str(pd) == text
    assert parse_disagg(str(pd)) == pd


def test_canonical_form_puts_prefill_first_and_normalises_each_pool() -> None:
    assert str(parse_disagg("d:pp2tp4 + p:ep8dp8")) == "p:dp8ep+d:tp4pp2"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("p:tp4", "two pools joined by '+'"),
        ("p:tp4+", "two pools joined by '+'"),
        ("p:tp4+d:tp4+d:tp2", "two pools joined by '+'"),
        ("p:tp4+x:tp4", "must start with 'p:'"),
        ("tp4+tp4", "must start with 'p:'"),
        ("p:tp4+p:tp2", "prefill pool is given twice"),
        ("p:tp4+d:tq4", "decode pool: layout 'tq4': cannot read"),
        ("p:tp0+d:tp4", "prefill pool: layout 'tp0': tp0 must be at least 1"),
        ("p:+d:tp4", "prefill pool: layout '': empty"),
    ],
)
def test_junk_is_one_line_naming_the_layout(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_disagg(text)
    message = str(info.value)
    assert fragment in message
    assert repr(text) in message
    assert "\n" not in message


def test_mixed_lists() -> None:
    items = parse_any_layouts("tp8, p:tp4+d:tp4 ,tp4x2")
    assert [str(x) for x in items] == ["tp8", "p:tp4+d:tp4", "tp4x2"]
    assert isinstance(items[1], DisaggLayout)
    assert isinstance(parse_any_layout("tp8"), Layout)
    with pytest.raises(SpecError, match="no layout given"):
        parse_any_layouts(" , ")


def test_value_type() -> None:
    a = parse_disagg("p:tp4+d:tp4")
    assert a == DisaggLayout(Layout(tp=4), Layout(tp=4))
    assert len({a, parse_disagg("d:tp4+p:tp4")}) == 1
    assert a.pool("prefill") == Layout(tp=4)
    with pytest.raises(ValueError):
        a.pool("router")


@pytest.mark.parametrize(
    ("text", "nodes", "fragment"),
    [
        ("p:tp16+d:tp4", 1, "the prefill pool tp16 needs 16 GPUs, the cluster has 8"),
        ("p:tp4+d:tp8", 1, "the pools overlap: prefill 4 + decode 8 = 12 GPUs, the cluster has 8"),
        ("p:tp12+d:tp4", 2, "spans nodes but is not a whole number"),
        ("p:tp6x2+d:tp4", 2, "do not pack onto 2 node(s)"),
    ],
)
def test_pool_problems(text: str, nodes: int, fragment: str) -> None:
    problems = pool_problems(parse_disagg(text), nodes=nodes, gpus_per_node=8)
    assert any(fragment in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_pools_that_pack() -> None:
    for text, nodes in [("p:tp4+d:tp4", 1), ("p:tp2x2+d:tp4", 1), ("p:tp8+d:tp8", 2),
                        ("p:tp4x2+d:tp8", 2), ("p:tp16+d:tp8x2", 4), ("p:tp4dp8ep+d:tp4dp80ep", 44),
                        ("p:tp6+d:tp2", 1)]:  # idle GPUs are the planner's warning, not a placement problem
        assert pool_problems(parse_disagg(text), nodes=nodes, gpus_per_node=8) == [], text


def test_one_node_link() -> None:
    assert one_node(parse_disagg("p:tp4+d:tp4"), 8)
    assert not one_node(parse_disagg("p:tp8+d:tp8"), 8)
