"""The Layout value type and its grammar.

Grammar (omitted parts are 1, order of tp/pp/dp/ep is free on input, canonical on output):
``tp<N>`` tensor parallel, ``pp<N>`` pipeline stages, ``dp<N>`` engine-internal data parallel ranks,
``ep`` (or ``ep<N>`` with N == tp*dp) expert parallel over the tp*dp ranks of a replica,
``x<R>`` R independent replicas, always last. Examples: ``tp8``, ``tp4x2``, ``tp8pp2``, ``dp8ep``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import SpecError

_PART = re.compile(r"(tp|pp|dp|ep)(\d*)")
_REPLICAS = re.compile(r"x(\d+)$")


@dataclass(frozen=True, order=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    replicas: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise SpecError(f"layout: {name} must be a positive integer, got {value!r}")

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    @property
    def ep_size(self) -> int:
        """Ranks the experts are spread over (1 without EP)."""
        return self.tp * self.dp if self.ep else 1

    def __str__(self) -> str:
        parts = []
        if self.tp > 1 or (self.pp == 1 and self.dp == 1 and not self.ep):
            parts.append(f"tp{self.tp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        if self.ep:
            parts.append("ep")
        text = "".join(parts)
        return f"{text}x{self.replicas}" if self.replicas > 1 else text

    @classmethod
    def parse(cls, text: str) -> Layout:
        return parse_layout(text)


def parse_layout(text: str) -> Layout:
    """Parse one layout string; raise SpecError naming the problem and the expected form."""
    raw = text
    s = text.strip().lower()
    hint = "expected e.g. tp8, tp4x2, tp8pp2, dp8ep, tp2dp4ep"
    if not s:
        raise SpecError(f"layout {raw!r}: empty; {hint}")
    replicas = 1
    if "x" in s:
        head, _, tail = s.partition("x")
        m = _REPLICAS.fullmatch("x" + tail)
        if not m:
            raise SpecError(f"layout {raw!r}: replicas must be written x<R> at the end; {hint}")
        replicas = int(m.group(1))
        s = head
        if not s:
            raise SpecError(f"layout {raw!r}: nothing before x<R>; {hint}")
    values: dict[str, int] = {}
    ep_degree: int | None = None
    ep = False
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise SpecError(f"layout {raw!r}: cannot read {s[pos:]!r}; {hint}")
        key, digits = m.group(1), m.group(2)
        if key in values or (key == "ep" and ep):
            raise SpecError(f"layout {raw!r}: {key} given twice")
        if key == "ep":
            ep = True
            ep_degree = int(digits) if digits else None
        else:
            if not digits:
                raise SpecError(f"layout {raw!r}: {key} needs a degree, e.g. {key}2")
            values[key] = int(digits)
        pos = m.end()
    for key, value in values.items():
        if value < 1:
            raise SpecError(f"layout {raw!r}: {key}{value} must be at least 1")
    if replicas < 1:
        raise SpecError(f"layout {raw!r}: x{replicas} must be at least 1")
    layout = Layout(
        tp=values.get("tp", 1), pp=values.get("pp", 1), dp=values.get("dp", 1), ep=ep, replicas=replicas
    )
    if ep_degree is not None and ep_degree != layout.tp * layout.dp:
        raise SpecError(
            f"layout {raw!r}: ep{ep_degree} must equal tp*dp = {layout.tp * layout.dp}; write plain 'ep'"
        )
    return layout


def parse_layouts(text: str) -> list[Layout]:
    """Parse a comma-separated list such as ``tp8,tp4x2``."""
    items = [item for item in (part.strip() for part in text.split(",")) if item]
    if not items:
        raise SpecError(f"layouts {text!r}: no layout given; expected e.g. tp8,tp4x2")
    return [parse_layout(item) for item in items]
