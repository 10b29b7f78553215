"""Layouts side by side against one at a time, served on the simulated engine over HTTP.

The same spec (qwen2.5-72b on 2 nodes x 8 H100, tp8 and tp4x2, one grid point; or the spec given)
swept `--served --one-at-a-time` and `--served --side-by-side`, alternating, ROUNDS times. Printed
per round: the wall time of each sweep (its stored timing.wall_s), the ratio, each one's winner and
whether any point was unjudged. On one machine the simulated servers of co-running layouts share
its CPU: a busy machine shows it as unjudged points, not as a slower decision.
Run: PYTHONPATH=. .venv/bin/python bench/side_by_side.py [SPEC] [ROUNDS]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support.side_by_side import side_by_side_spec

SPEC: dict[str, Any] = side_by_side_spec(num_requests=24)


def _sweep(spec: str, db: Path, flag: str) -> tuple[float, str | None, bool]:
    out = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", "sweep", spec, "--served",
         flag, "--measure-all", "--store", str(db), "--json"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if out.returncode not in (0, 3, 8):
        raise SystemExit(f"orch sweep {flag} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    data = json.loads(out.stdout)
    return data["sweep"]["timing"]["wall_s"], data["selection"]["winner"], data["selection"]["sound"]


def main() -> None:
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with tempfile.TemporaryDirectory() as tmp:
        spec = sys.argv[1] if len(sys.argv) > 1 else str(Path(tmp) / "spec.yaml")
        if len(sys.argv) <= 1:
            Path(spec).write_text(yaml.safe_dump(SPEC))
        print(f"{'round':>5} {'one at a time s':>16} {'side by side s':>15} {'ratio':>6}  winners (sound)")
        for r in range(rounds):
            alone = _sweep(spec, Path(tmp) / f"a{r}.db", "--one-at-a-time")
            both = _sweep(spec, Path(tmp) / f"b{r}.db", "--side-by-side")
            print(f"{r + 1:>5} {alone[0]:>16.1f} {both[0]:>15.1f} {both[0] / alone[0]:>6.2f}  "
                  f"{alone[1]} ({alone[2]}) / {both[1]} ({both[2]})")


if __name__ == "__main__":
    main()
