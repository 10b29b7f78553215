"""`orch compile` refuses a layout the planner rejects (exit 2, the planner's reasons); --force emits it
with a warning."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def _orch(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from orchestrator.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_compile_refuses_layouts_that_do_not_fit_or_split_the_heads() -> None:
    for layout, reason in (("tp2", "exceed the usable"), ("tp3", "heads")):
        out = _orch("compile", SPEC, "--layout", layout, "--engine", "vllm")
        assert out.returncode == 2, (layout, out.stdout, out.stderr)
        assert out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"layout {layout}: the planner rejects it" in lines[0] and reason in lines[0], lines[0]
        assert "--force" in lines[0]


def test_compile_force_emits_with_a_warning_and_a_fitting_layout_needs_none() -> None:
    forced = _orch("compile", SPEC, "--layout", "tp2", "--engine", "vllm", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "vllm serve" in forced.stdout and " -tp 2 " in forced.stdout
    assert "warning: layout tp2 is rejected by the planner, emitted because of --force" in forced.stderr
    ok = _orch("compile", SPEC, "--layout", "tp8", "--engine", "vllm")
    assert ok.returncode == 0, ok.stderr
    assert " -tp 8 " in ok.stdout and "rejected" not in ok.stderr
