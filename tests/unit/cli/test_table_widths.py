"""Tables read at 80 and 120 columns: no line wider than the terminal, every number whole (the JSON
output's values appear as printed), the columns left out named with --wide to show them; and where a
terminal is narrower than the essential columns, a cut cell ends in an ellipsis."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from orchestrator.cli.fit_table import FitTable
from tests.support.cli import main_in_process
from tests.support.paths import ROOT

SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def _main(args: list[str], width: int | None, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    if width is not None:
        monkeypatch.setenv("COLUMNS", str(width))
    return main_in_process(args, monkeypatch, capsys)


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]


@pytest.mark.parametrize("width", [80, 120])
def test_plan_fits_and_keeps_every_number_whole(width: int, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["plan", SPEC], width, monkeypatch, capsys)
    assert code == 0, err
    assert all(len(line) <= width for line in out.splitlines()), out
    _, js, _ = _main(["plan", SPEC, "--json"], None, monkeypatch, capsys)
    rows = json.loads(js)["rows"]
    table = "\n".join(_table_lines(out))
    for row in rows:
        if row["fits"]:
            best = row["best"]
            shown = f"b{best['batch']}: {best['output_tokens_per_s_per_gpu']:,.0f} @ {best['itl_ms']:.1f} ms"
            assert shown in table, (shown, table)  # the key column, whole, at any width
    if width == 80:
        assert "left out at 80 columns" in out and "--wide shows them" in out
    # --wide: every column at full width, wider than the terminal (for less -S), nothing cut
    wide_code, wide_out, _ = _main(["plan", SPEC, "--wide"], width, monkeypatch, capsys)
    assert wide_code == 0 and "columns: KV" not in wide_out and "KV tok total" in wide_out
    assert "…" not in wide_out and max(len(line) for line in wide_out.splitlines()) > 120


def test_sweep_report_fits_at_80_and_120(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "r.db")
    code, _, err = _main(["sweep", SPEC, "--layouts", "tp8,tp4x2", "--rates", "4,8", "--num-requests", "120",
                          "--store", store], 240, monkeypatch, capsys)
    assert code in (0, 3), err
    _, js, _ = _main(["report", "latest", "--store", store, "--json"], None, monkeypatch, capsys)
    layouts = json.loads(js)["layouts"]
    ttft = [f"{p['metrics']['ttft_ms']['p99']:,.1f}" for lay in layouts for p in lay["points"]]
    for width in (80, 120):
        code, out, err = _main(["report", "latest", "--store", store], width, monkeypatch, capsys)
        assert code == 0, err
        table = _table_lines(out)
        assert table and all(len(line) <= width for line in table), "\n".join(table)
        cells = {c.strip() for line in table for c in line.split("│")}
        assert all(v in cells for v in ttft), (ttft, "\n".join(table))  # TTFT p99 whole in its cell


def test_a_terminal_narrower_than_the_essential_columns_cuts_with_an_ellipsis() -> None:
    table = FitTable("t")
    for name in ("layout", "TTFT p99 ms", "goodput"):
        table.column(name)
    table.row("tp8pp2x4", "12,345.6", "0.1234")
    console = Console(width=24, record=True, color_system=None)
    table.print(console)
    text = console.export_text()
    assert all(len(line) <= 24 for line in text.splitlines()), text
    assert "…" in text  # a cut cell says so
    roomy = Console(width=80, record=True, color_system=None)
    table.print(roomy)
    assert "12,345.6" in roomy.export_text() and "…" not in roomy.export_text()


words = st.text(alphabet="abcxyz0123456789./:-=@%()", min_size=1, max_size=14)
cell = (st.lists(words, min_size=1, max_size=6).map(" ".join)
        | st.sampled_from(["-", "[red]no[/]", "99.0 / 647"]))


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 5), st.integers(0, 6), st.sampled_from([40, 80, 120, 240]), st.booleans())
def test_drawn_directly_it_is_the_text_rich_draws(data: st.DataObject, n_cols: int, n_rows: int, width: int,
                                                   wide: bool) -> None:
    # Off a terminal the table is drawn without rich (for speed); it must be rich's text exactly.
    from rich.markup import escape

    table = FitTable(None, wide=wide)
    for i in range(n_cols):
        header = data.draw(st.lists(words, min_size=1, max_size=4).map(" ".join))
        table.column(escape(header), justify=data.draw(st.sampled_from(["left", "right"])), keep=i % 3,
                     wrap=data.draw(st.booleans()))
    for _ in range(n_rows):
        table.row(*(data.draw(cell) for _ in range(n_cols)))
    _, widths = table.layout(width)
    if any(w is None for w in widths):
        return  # squeezed by rich itself
    fast = Console(width=width, record=True, color_system=None, file=io.StringIO())
    table.print(fast)
    by_rich = Console(width=width, record=True, color_system=None, file=io.StringIO())
    rich_table, _ = table.table(width)
    if wide:
        by_rich.width = max(width, 1 + sum(c.natural() + 3 for c in table.cols))
    by_rich.print(rich_table, crop=False)
    drawn = [line for line in fast.export_text().splitlines() if line[:1] in "┏┃┡│└"]
    assert drawn == by_rich.export_text().splitlines()


def test_emoji_codes_print_as_written_on_a_terminal_and_off_one() -> None:
    # rich reads ':b:' in a markup string as an emoji; a cell (a layout, a verdict) is printed as written.
    table = FitTable(None)
    table.column("name :b:", justify="left")
    table.row("x:@::b:6a37=")
    for color in (None, "truecolor"):
        console = Console(width=40, record=True, color_system=color, file=io.StringIO())  # type: ignore[arg-type]
        table.print(console)
        text = console.export_text()
        assert "x:@::b:6a37=" in text and "name :b:" in text, text
