"""Comma-separated flag values, parsed one way for every command (one-line errors naming the flag)."""

from __future__ import annotations

from orchestrator.errors import SpecError


def parse_ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecError(f"{flag} {text!r}: expected comma-separated integers, e.g. {flag} 1,64") from None
    if not values:
        raise SpecError(f"{flag}: give at least one value")
    return values


def parse_rates(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"--rates {text!r}: expected comma-separated numbers, e.g. --rates 1,4") from None
    if not rates or any(r <= 0 for r in rates):
        raise SpecError("--rates: give positive requests per second, e.g. --rates 1,4")
    return rates
