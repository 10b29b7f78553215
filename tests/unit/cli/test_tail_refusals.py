"""Inputs that were silently ignored or answered vaguely, each refused in one line through `orch`'s
real main(): redundant experts on a dense model, a prefill/decode pair given to `orch experts`, and an
empty `orch compile --nodes`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.paths import ROOT

QWEN72B = ROOT / "layouts" / "qwen72b.yaml"  # dense


def _one_line(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.stderr, lines
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("where", ["engine", "disagg.decode"])
def test_redundant_experts_on_a_dense_model_are_refused(orch: Orch, tmp_path: Path, where: str) -> None:
    text = QWEN72B.read_text(encoding="utf-8")
    if where == "engine":
        text = text.replace("engine:\n", "engine:\n  num_redundant_experts: 8\n", 1)
    else:
        text += "\ndisagg:\n  decode: {num_redundant_experts: 8}\n"
    path = tmp_path / "dense.yaml"
    path.write_text(text, encoding="utf-8")
    for command in ("validate", "plan"):
        _one_line(orch(command, str(path)), str(path), f"{where}.num_redundant_experts",
                  "dense model", "remove the field")
    # the spec as shipped still validates: the check is the field's, not the model's
    assert orch("validate", str(QWEN72B)).returncode == 0


@pytest.mark.parametrize(("layout", "needles"), [
    ("p:tp8+d:dp16ep", ("one pool's layout", "--layout dp16ep (the decode pool)")),
    ("p:dp8ep+d:tp8", ("--layout dp8ep (the prefill pool)",)),
    ("p:tp8+d:tp8", ("with 'ep'",)),
])
def test_experts_names_the_pool_layout_to_pass_for_a_pair(orch: Orch, layout: str,
                                                          needles: tuple[str, ...]) -> None:
    out = orch("experts", "--layout", layout)
    _one_line(out, f"--layout {layout}", *needles)
    assert "cannot read" not in out.stderr


@pytest.mark.parametrize("nodes", ["", " ", "gpu1,", "gpu1,,gpu2"])
def test_compile_refuses_an_empty_node_address(orch: Orch, nodes: str) -> None:
    _one_line(orch("compile", str(QWEN72B), "--layout", "tp4x2", "--nodes", nodes),
              f"--nodes {nodes!r}", "empty node address")
