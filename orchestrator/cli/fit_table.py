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

from rich.cells import cell_len, set_cell_size
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
    plains: list[str] = field(default_factory=list)  # each cell as printed
    widest: int = 0

    def add(self, cell: str | Text) -> None:
        if isinstance(cell, Text):
            plain = cell.plain
        else:  # markup only where a bracket is (most cells are numbers): parsing it costs
            plain = Text.from_markup(cell, emoji=False).plain if "[" in cell else cell
        self.cells.append(cell)
        self.plains.append(plain)
        self.widest = max(self.widest, max((cell_len(line) for line in plain.split("\n")), default=0))

    def data_width(self) -> int:
        return self.widest

    @property
    def title(self) -> str:
        """The header as printed (it is markup, as rich reads it)."""
        return Text.from_markup(self.header, emoji=False).plain

    def narrowest(self) -> int:
        """Its narrowest width: the data whole (a wrapping column: WRAP_MIN), the header wrapped."""
        header = max((cell_len(w) for w in self.title.split()), default=0)
        data = min(self.data_width(), WRAP_MIN) if self.wrap else self.data_width()
        return max(header, data)

    def natural(self) -> int:
        """Its width with every cell and the header on one line."""
        return max(cell_len(self.title), self.data_width())

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
            col.add(cell)

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

    def layout(self, width: int) -> tuple[list[_Col], list[int | None]]:
        """The columns shown at `width` and each one's width (None: rich squeezes them)."""
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
        return cols, widths

    def table(self, width: int) -> tuple[Table, list[str]]:
        """The rich table for `width` and the headers of the columns left out."""
        cols, widths = self.layout(width)
        table = Table(title=self.title, title_justify="left")
        for c, w in zip(cols, widths, strict=True):
            table.add_column(_text(c.header), justify=c.justify, no_wrap=False, overflow="ellipsis", width=w)
        for r in range(len(self.cols[0].cells) if self.cols else 0):
            table.add_row(*(_text(c.cells[r]) for c in cols))
        return table, [c.header for c in self.cols if c not in cols]

    def print(self, console: Console) -> None:
        if self.title:  # a line of its own: rich would wrap a title wider than the table
            console.print(Text(self.title, style="table.title"), highlight=False, soft_wrap=True)
        cols, widths = self.layout(console.width)
        hidden = [c.header for c in self.cols if c not in cols]
        fixed = [w for w in widths if w is not None]
        if console.color_system is None and len(fixed) == len(widths):
            # No colour to draw (a pipe, a file, a CI log): the same text as rich's, drawn directly;
            # rich spends about 0.1 ms a cell, which for the 1,024-GPU plan's 3,000 cells was most of
            # the command's time. Written as it is: console.out would split the lines into segments
            # again (about 0.01 s for that plan); a recording console (export_text) gets it through rich.
            text = "\n".join(plain_lines(cols, fixed))
            if console.record:
                console.out(text, highlight=False)
            else:
                console.file.write(text + "\n")
        else:
            table, _ = self.table(console.width)
            table.title = None
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


def _text(cell: str | Text) -> Text:
    """A cell as rich prints it: markup read, but no emoji codes (':b:' in a name stays ':b:', as it
    does drawn directly)."""
    return cell if isinstance(cell, Text) else Text.from_markup(cell, emoji=False)


def _wrap(text: str, width: int) -> list[str]:
    """rich's word wrap of plain text into `width` cells: words greedily, one space apart; a word
    longer than the width on a line of its own, cut with an ellipsis (overflow="ellipsis")."""
    lines: list[str] = []
    for part in text.split("\n"):
        line = ""
        for word in part.split():
            if cell_len(word) > width:
                word = set_cell_size(word, width - 1) + "…"
            if not line:
                line = word
            elif cell_len(line) + 1 + cell_len(word) <= width:
                line += " " + word
            else:
                lines.append(line)
                line = word
        lines.append(line)
    return lines


def _justify(text: str, width: int, justify: Justify) -> str:
    pad = width - cell_len(text)
    if justify == "right":
        return " " * pad + text
    if justify == "center":
        return " " * (pad // 2) + text + " " * (pad - pad // 2)
    return text + " " * pad


def plain_lines(cols: list[_Col], widths: list[int]) -> list[str]:
    """The table as rich draws it (box.HEAVY_HEAD, one space of padding, headers at the bottom of
    their row, cells at the top), without colour."""
    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def block(cells: list[str], edge: str, bottom: bool) -> list[str]:
        wrapped = [_wrap(cell, w) for cell, w in zip(cells, widths, strict=True)]
        height = max(len(lines) for lines in wrapped)
        out = []
        for k in range(height):
            parts = []
            for c, lines, w in zip(cols, wrapped, widths, strict=True):
                i = k - (height - len(lines)) if bottom else k
                text = lines[i] if 0 <= i < len(lines) else ""
                parts.append(" " + _justify(text, w, c.justify) + " ")
            out.append(edge + edge.join(parts) + edge)
        return out

    lines = [rule("┏", "┳", "┓", "━"), *block([c.title for c in cols], "┃", bottom=True),
             rule("┡", "╇", "┩", "━")]
    for r in range(len(cols[0].cells) if cols else 0):
        lines += block([c.plains[r] for c in cols], "│", bottom=False)
    lines.append(rule("└", "┴", "┘", "─"))
    return lines
