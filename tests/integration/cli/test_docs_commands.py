"""Every `orch` command the README and docs/ show, run as a new user would type it (in a scratch
directory beside the repository's layouts/), on the simulated engine in virtual time.

A command is taken from a fenced block: a `$ orch ...` line (the block then shows its output), or an
`orch ...` line in a bash block. What it prints is held against the page where that is deterministic:
an `error:` line exactly, and the whole output of plan, experts, compile, and of sweeps and simulations
in virtual time (run ids and wall-clock lines aside; where the page cuts with `...`, the lines it
keeps). Commands that need something this test does not build (a GPU engine, a cluster, a file the page
writes by hand, a server at a fixed port, a placeholder such as RUN) are listed with that reason; a new
command must be one or the other.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")

# Why a documented command is not run here (the first substring found in the command decides).
NOT_HERE = {
    "RUN": "placeholder for a run id",
    "SPEC": "placeholder for a spec",
    "URL": "placeholder for a server",
    "[": "a synopsis with optional parts",
    "bad.yaml": "the page does not show the file (tests/unit/cli/test_bad_inputs.py runs these cases)",
    "bad2.yaml": "the page does not show the file (tests/unit/cli/test_bad_inputs.py runs these cases)",
    "bad3.yaml": "the page does not show the file (tests/unit/cli/test_bad_inputs.py runs these cases)",
    "127.0.0.1:": "a server at the port of the session that wrote the page",
    "--engine vllm --layouts": "real vLLM (the vllm_cpu tier runs it: pipeline/test_sweep_vllm_cpu.py)",
    "orch consistency": "real vLLM (the vllm_cpu tier runs it: consistency/test_vllm_cpu.py)",
    "orch gc": "a Kubernetes API server (deploy/test_k8s_target.py runs it against the fake one)",
    "ray.db": "a Ray cluster (pipeline/test_ray_sweep.py)",
    "ray-sim.yaml": "a Ray cluster (pipeline/test_ray_sweep.py)",
    "bad.db": "a store from a failed Ray sweep (unit/test_promote.py covers the refusal)",
    "results.db": "a store of a synthetic run (unit/calibrate/test_fit.py)",
    "/spec/spec.yaml": "the nightly CronJob's pod (deploy/test_k8s_nightly.py)",
    "spec.yaml": "a spec the page builds from layouts/qwen72b.yaml with a kubernetes target",
}
# Output that is the same on every machine (virtual time included), held against the page line by line.
DETERMINISTIC = ("orch plan", "orch experts", "orch compile", "orch sweep", "orch simulate")
# ... except the lines that report wall-clock time.
WALL_CLOCK = ("time to decision:",)


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    command: str
    shown: tuple[str, ...]  # the output lines the page shows after a `$ orch` line


def _commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        fence: str | None = None
        i = 0
        while i < len(lines):
            text = lines[i].strip()
            if text.startswith("```"):
                fence = None if fence is not None else text[3:].strip()
                i += 1
                continue
            prompt = text.startswith("$ orch ")
            if fence is not None and (prompt or (fence in ("bash", "sh") and text.startswith("orch "))):
                start = i
                cmd = text[2:] if prompt else text
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
                shown = []
                if prompt:
                    j = i + 1
                    while j < len(lines) and not lines[j].startswith(("$ ", "```")):
                        shown.append(lines[j])
                        j += 1
                found.append(DocCommand(f"{page.relative_to(ROOT)}", start + 1, cmd, tuple(shown)))
            i += 1
    return found


COMMANDS = _commands()


def _why_not(cmd: str) -> str | None:
    for needle, why in NOT_HERE.items():
        if needle in cmd:
            return why
    return None


def _argv(cmd: str) -> tuple[list[str], str | None]:
    """The argv after `orch` and the file a `> FILE` redirect names; a `# comment` is dropped."""
    words = shlex.split(cmd, comments=True)
    out = None
    if ">" in words:
        k = words.index(">")
        out, words = words[k + 1], words[:k]
    assert words[0] == "orch", cmd
    return words[1:], out


def _norm(lines: list[str] | tuple[str, ...]) -> list[str]:
    """Lines to compare: run ids as RUN, trailing spaces and wall-clock lines dropped, `...` kept."""
    return [RUN_ID.sub("RUN", ln.rstrip()) for ln in lines
            if ln.strip() and not ln.lstrip().startswith(WALL_CLOCK)]


def _matches(got: list[str], shown: list[str]) -> bool:
    """The page's lines are what it prints; where the page cuts with `...`, in order with gaps."""
    if "..." not in (ln.strip() for ln in shown):
        return got == shown
    rest = iter(got)
    return all(any(g == ln for g in rest) for ln in shown if ln.strip() != "...")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("newuser")
    (here / "layouts").symlink_to(ROOT / "layouts")
    if (ROOT / ".cache").is_dir():
        (here / ".cache").symlink_to(ROOT / ".cache")
    return here


def test_every_documented_command_is_run_or_says_why_not() -> None:
    assert len(COMMANDS) > 20, [c.command for c in COMMANDS]
    runnable = [c for c in COMMANDS if _why_not(c.command) is None]
    # The main job, the planner, both simulate forms, the compile and experts examples at least.
    for needle in ("orch sweep layouts/qwen72b.yaml", "orch plan layouts/qwen72b.yaml", "orch simulate",
                   "orch experts", "orch compile"):
        assert any(c.command.startswith(needle) for c in runnable), needle


@pytest.mark.parametrize("doc", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_documented_command(doc: DocCommand, scratch: Path) -> None:
    why = _why_not(doc.command)
    if why is not None:
        pytest.skip(f"{doc.command!r}: {why}")
    argv, redirect = _argv(doc.command)
    if "tiny-cpu" in doc.command and not (ROOT / ".cache" / "tiny-llama" / "config.json").is_file():
        pytest.skip("layouts/tiny-cpu.yaml needs the tiny model: scripts/build-tiny-model.sh")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    res = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", *argv],
                         cwd=scratch, capture_output=True, text=True, timeout=600, check=False,
                         env={**env, "PYTHONPATH": str(ROOT)})
    where = f"{doc.page}:{doc.line}: `{doc.command}`"
    assert "Traceback" not in res.stderr, f"{where}\n{res.stderr[-3000:]}"
    errors = [ln for ln in doc.shown if ln.startswith("error:")]
    if errors:
        assert res.returncode != 0, where
        assert res.stderr.strip().splitlines()[-1] == errors[-1], f"{where}: the page shows {errors[-1]!r}"
        return
    assert res.returncode == 0, f"{where}: exit {res.returncode}\n{res.stderr[-3000:]}"
    printed = res.stdout
    if redirect:  # the next command on the page may read it
        Path(scratch, redirect).write_text(printed, encoding="utf-8")
    assert printed.strip(), where
    shown = _norm(doc.shown)
    if not shown:
        return
    got = _norm(printed.splitlines())
    if doc.command.startswith(DETERMINISTIC):
        assert _matches(got, shown), (
            f"{where}: the page's output differs from what it prints now (paste this):\n" + printed)
