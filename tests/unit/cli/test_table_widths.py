"""Tables read at 80 and 120 columns: no line wider than the terminal, every number whole (the JSON
output's values appear as printed), the columns left out named with --wide to show them; and where a
terminal is narrower than the essential columns, a cut cell ends in an ellipsis."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.fit_table import FitTable
from tests.support.paths import ROOT

SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def _main(args: list[str], width: int | None, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from orchestrator.cli import main

    if width is not None:
        monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(sys, "argv", ["orch", *args])
    code: int | str | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return int(code or 0), out.out, out.err


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
