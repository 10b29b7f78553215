"""Where the repository is, for tests that read its files (layouts/, helm/, k8s/, docs/) or start a child
Python that must import `tests.support`."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ROOT / "layouts"


def pythonpath_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's environment) with the repository root first on PYTHONPATH, so a
    child `python -c SCRIPT` can `import tests.support...` without editing sys.path."""
    out = dict(os.environ if env is None else env)
    rest = out.get("PYTHONPATH")
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), rest]) if rest else str(ROOT)
    return out
