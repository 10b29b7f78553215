"""Tables that fit the terminal: at 80 or 120 columns a table shows the columns that fit whole, in
order of importance, and says which it left out; `--wide` prints every column at full width, wider
than the terminal if need be (for `less -S` or a file). A number is never cut, and a cell that must be
(a terminal narrower than the essential columns) ends in an ellipsis.

Rich on its own folds every column to fit, so at 80 columns a TTFT of 127.9 came out as `1` over
three lines. Here each column's data width is its floor, headers wrap at their spaces, and only
columns marked `wrap` (verdicts, reasons) wrap their text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console

Justify = Literal["left", "right", "center"]
EDGE = 3  # a column's border and padding in rich's default box: "│ x " (+1 for the last border)
WRAP_MIN = 12  # the narrowest a wrapping text column (a verdict, a reason) is squeezed to


@dataclass
class _Col:
    header: str
    justify: Justify
    keep: int
    wrap: bool
    cells: list[str | Text] = field(default_factory=list)  # a str is markup; a Text prints as written

    def data_width(self) -> int:
        texts = (c if isinstance(c, Text) else Text.from_markup(c) for c in self.cells)
        return max((t.cell_len for t in texts), default=0)

    def narrowest(self) -> int:
        """Its narrowest width: the data whole (a wrapping column: WRAP_MIN), the header wrapped."""
        header = max((len(w) for w in self.header.split()), default=0)
        data = min(self.data_width(), WRAP_MIN) if self.wrap else self.data_width()
        return max(header, data)

    def natural(self) -> int:
        """Its width with every cell and the header on one line."""
        return max(len(self.header), self.data_width())

    def need(self) -> int:
        """Columns of the console it takes at its narrowest."""
        return self.narrowest() + EDGE


class FitTable:
    """Columns added with a `keep` rank (0: always shown; higher ranks are left out first when the
    console is too narrow), then rows; `print` chooses the columns and prints the table."""

    def __init__(self, title: str | None = None, *, wide: bool = False) -> None:
        self.title = title
        self.wide = wide
        self.cols: list[_Col] = []

    def column(self, header: str, *, justify: Justify = "right", keep: int = 0, wrap: bool = False) -> None:
        self.cols.append(_Col(header, justify, keep, wrap))

    def row(self, *cells: str | Text) -> None:
        if len(cells) != len(self.cols):
            raise ValueError(f"{len(cells)} cells for {len(self.cols)} columns")  # a bug
        for col, cell in zip(self.cols, cells, strict=True):
            col.cells.append(cell)

    def chosen(self, width: int) -> list[_Col]:
        """The columns shown at `width`: all with --wide, else by rank while they fit."""
        if self.wide:
            return list(self.cols)
        shown: set[int] = set()
        used = 1
        for i in sorted(range(len(self.cols)), key=lambda i: (self.cols[i].keep, i)):
            need = self.cols[i].need()
            if self.cols[i].keep == 0 or used + need <= width:
                shown.add(i)
                used += need
        return [c for i, c in enumerate(self.cols) if i in shown]

    def fits(self, width: int) -> bool:
        """Every column shown whole at `width`."""
        return 1 + sum(c.need() for c in self.cols) <= width

    def table(self, width: int) -> tuple[Table, list[str]]:
        """The rich table for `width` and the headers of the columns left out."""
        cols = self.chosen(width)
        widths: list[int | None] = [c.narrowest() for c in cols]
        spare = width - 1 - sum(c.need() for c in cols)
        if self.wide:  # every column at its full width, however wide (for less -S, a file, a wide window)
            widths = [c.natural() for c in cols]
        elif spare < 0:  # narrower than the essential columns: rich squeezes them, cut cells end in "…"
            widths = [None] * len(cols)
        else:  # room to spare: wrapped text (verdicts) on fewer lines first, then headers
            for i in sorted(range(len(cols)), key=lambda i: not cols[i].wrap):
                c = cols[i]
                grow = min(spare, c.natural() - c.narrowest())
                widths[i] = c.narrowest() + grow
                spare -= grow
        table = Table(title=self.title, title_justify="left")
        for c, w in zip(cols, widths, strict=True):
            table.add_column(c.header, justify=c.justify, no_wrap=False, overflow="ellipsis", width=w)
        for r in range(len(self.cols[0].cells) if self.cols else 0):
            table.add_row(*(c.cells[r] for c in cols))
        return table, [c.header for c in self.cols if c not in cols]

    def print(self, console: Console) -> None:
        table, hidden = self.table(console.width)
        if self.title:  # a line of its own: rich would wrap a title wider than the table
            table.title = None
            console.print(Text(self.title, style="table.title"), highlight=False, soft_wrap=True)
        if self.wide:  # wider than the console when it must be, never cropped
            full = 1 + sum(c.natural() + EDGE for c in self.cols)
            width = console.width
            console.width = max(full, width)  # rich caps print(width=...) at the console's own
            try:
                console.print(table, crop=False)
            finally:
                console.width = width
        else:
            console.print(table)
        if hidden:
            console.print(f"({len(hidden)} column(s) left out at {console.width} columns: "
                          f"{', '.join(hidden)}; --wide shows them)", markup=False, highlight=False,
                          style="dim")
