"""vLLM's config step and SGLang's parser read orch's speculative-decoding flags as orch means them.

vLLM: `vllm serve TINY --speculative-config JSON` through the serve parser and create_engine_config(),
which builds SpeculativeConfig against the tiny model (and the tiny model as its own draft). SGLang:
prepare_server_args over the flags. One subprocess per engine, as tests/integration/test_engine_parsers.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.speculative_args import (
    sglang_speculative_args,
    vllm_speculative_args,
)
from orchestrator.plan.speculative import SpeculativeSettings

PARSERS = Path(__file__).resolve().parents[1] / "parsers"


def _venv_python(var: str, script: str) -> str:
    path = os.environ.get(var)
    if path:
        return path
    how = f"{var} is not set; run `source .ci/setup.d/{script}` (builds a cached venv) and rerun"
    if os.environ.get("ORCH_CI") == "1":
        pytest.fail(f"CI must not skip this tier: {how}")
    pytest.skip(how)


def _run(python: str, script: str, argvs: list[list[str]], tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "out.json"
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", HF_HUB_OFFLINE="1")
    proc = subprocess.run([python, str(PARSERS / script), str(out)], input=json.dumps(argvs), text=True,
                          capture_output=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
    results: list[dict[str, Any]] = json.loads(out.read_text())
    assert len(results) == len(argvs)
    return results


def _settings(method: str, k: int, draft: str | None = None, **kw: Any) -> SpeculativeSettings:
    return SpeculativeSettings(method, k, (0.5,) * k, draft_path=draft, **kw)


@pytest.mark.vllm_cpu
def test_vllm_reads_the_speculative_config_as_meant(tmp_path: Path) -> None:
    python = _venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    tiny = tmp_path / "tiny"
    subprocess.run([python, str(PARSERS / "build_tiny_model.py"), str(tiny)], check=True, timeout=600,
                   capture_output=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    cases = {
        "ngram-defaults": _settings("ngram", 4),
        "ngram-min-only": _settings("ngram", 3, prompt_lookup_min=2),
        "draft-model": _settings("draft_model", 3, str(tiny)),
        "eagle3": _settings("eagle3", 2, str(tiny)),
        "mtp": _settings("mtp", 1),
    }
    argvs = [[str(tiny), "--max-model-len", "512", *vllm_speculative_args(s, tp=1)] for s in cases.values()]
    got = dict(zip(cases, _run(python, "vllm_speculative.py", argvs, tmp_path), strict=True))
    for name in ("ngram-defaults", "ngram-min-only", "draft-model", "eagle3"):
        assert got[name]["ok"], f"{name}: {got[name]['error']}"
        read = got[name]["speculative"]
        assert read["method"] == cases[name].method
        assert read["num_speculative_tokens"] == cases[name].num_speculative_tokens
    assert (got["ngram-defaults"]["speculative"]["prompt_lookup_min"],
            got["ngram-defaults"]["speculative"]["prompt_lookup_max"]) == (5, 5)
    assert (got["ngram-min-only"]["speculative"]["prompt_lookup_min"],
            got["ngram-min-only"]["speculative"]["prompt_lookup_max"]) == (2, 2)
    assert got["draft-model"]["speculative"]["draft_tensor_parallel_size"] == 1
    # A Llama has no MTP layers: vLLM refuses too (orch refuses earlier, naming the field).
    assert not got["mtp"]["ok"] and "mtp" in got["mtp"]["error"]


@pytest.mark.sglang_parser
def test_sglang_reads_the_speculative_flags_as_meant(tmp_path: Path) -> None:
    python = _venv_python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    cases = {
        "ngram": _settings("ngram", 4),
        "eagle3": _settings("eagle3", 3, "/models/eagle3-head"),
        "mtp": _settings("mtp", 2),
        "standalone": _settings("draft_model", 5, "/models/draft"),
    }
    argvs = [["--model-path", "/models/tiny", *sglang_speculative_args(s)] for s in cases.values()]
    got = dict(zip(cases, _run(python, "sglang_speculative.py", argvs, tmp_path), strict=True))
    for name, result in got.items():
        assert result["ok"], f"{name}: {result['error']}"
    args = {name: r["args"] for name, r in got.items()}
    assert args["ngram"]["speculative_algorithm"] == "NGRAM"
    assert args["ngram"]["speculative_num_draft_tokens"] == 5  # k + 1, the verified width
    assert args["ngram"]["speculative_ngram_max_bfs_breadth"] == 1
    assert args["eagle3"]["speculative_draft_model_path"] == "/models/eagle3-head"
    assert (args["eagle3"]["speculative_num_steps"], args["eagle3"]["speculative_eagle_topk"],
            args["eagle3"]["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert args["mtp"]["speculative_algorithm"] == "NEXTN" and args["mtp"]["speculative_num_steps"] == 2
    assert args["standalone"]["speculative_algorithm"] == "STANDALONE"
    assert args["standalone"]["speculative_num_draft_tokens"] == 6
