import pytest

from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout, parse_layouts


@pytest.mark.parametrize(
    ("text", "tp", "pp", "dp", "ep", "replicas", "gpus"),
    [
        ("tp8", 8, 1, 1, False, 1, 8),
        ("tp4x2", 4, 1, 1, False, 2, 8),
        ("tp8pp2", 8, 2, 1, False, 1, 16),
        ("dp8ep", 1, 1, 8, True, 1, 8),
        ("tp2dp4ep", 2, 1, 4, True, 1, 8),
        ("tp1x8", 1, 1, 1, False, 8, 8),
        ("tp2dp4ep8", 2, 1, 4, True, 1, 8),
    ],
)
def test_parse(text: str, tp: int, pp: int, dp: int, ep: bool, replicas: int, gpus: int) -> None:
    layout = parse_layout(text)
    assert (layout.tp, layout.pp, layout.dp, layout.ep, layout.replicas) == (tp, pp, dp, ep, replicas)
    assert layout.gpus == gpus


@pytest.mark.parametrize(
    "text", ["tp8", "tp4x2", "tp8pp2", "dp8ep", "tp2dp4ep", "tp1x8", "tp1", "ep", "pp4x2"]
)
def test_canonical_round_trip(text: str) -> None:
    assert str(parse_layout(text)) == text


def test_non_canonical_input_is_normalised() -> None:
    assert str(parse_layout("pp2tp8")) == "tp8pp2"
    assert str(parse_layout("ep8dp8")) == "dp8ep"
    assert str(parse_layout("tp4x1")) == "tp4"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tp3x", "x<R>"),
        ("tp0", "at least 1"),
        ("dp2ep4", "must equal tp*dp = 2"),
        ("tp2tp2", "twice"),
        ("foo", "cannot read"),
        ("", "empty"),
        ("tp", "needs a degree"),
        ("tp2x0", "at least 1"),
    ],
)
def test_junk_is_rejected(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment.replace("*", r"\*").replace("<", "<")):
        parse_layout(text)


def test_layout_value_type() -> None:
    assert Layout(tp=4, replicas=2) == parse_layout("tp4x2")
    assert len({parse_layout("tp8"), Layout(tp=8)}) == 1
    assert parse_layout("tp2dp4ep").ep_size == 8
    with pytest.raises(SpecError):
        Layout(tp=0)


def test_parse_layouts_list() -> None:
    assert [str(x) for x in parse_layouts("tp8, tp4x2,")] == ["tp8", "tp4x2"]
    with pytest.raises(SpecError):
        parse_layouts(" , ")
