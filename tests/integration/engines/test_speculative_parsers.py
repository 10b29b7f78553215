"""vLLM's config step and SGLang's parser read orch's speculative-decoding flags as orch means them.

vLLM: `vllm serve TINY --speculative-config JSON` through the serve parser and create_engine_config(),
which builds SpeculativeConfig against the tiny model (and the tiny model as its own draft). SGLang:
prepare_server_args over the flags. One subprocess per engine (tests.support.engine_cases.run_parser).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.speculative_args import (
    sglang_speculative_args,
    vllm_speculative_args,
)
from orchestrator.plan.speculative import SpeculativeSettings
from tests.support.cpu_vllm_helpers import build_tiny_model
from tests.support.engine_cases import run_parser, venv_python


def _settings(method: str, k: int, draft: str | None = None, **kw: Any) -> SpeculativeSettings:
    return SpeculativeSettings(method, k, (0.5,) * k, draft_path=draft, **kw)


@pytest.mark.vllm_cpu
def test_vllm_reads_the_speculative_config_as_meant(tmp_path: Path) -> None:
    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    tiny = build_tiny_model(tmp_path / "tiny")
    cases = {
        "ngram-defaults": _settings("ngram", 4),
        "ngram-min-only": _settings("ngram", 3, prompt_lookup_min=2),
        "draft-model": _settings("draft_model", 3, str(tiny)),
        "eagle3": _settings("eagle3", 2, str(tiny)),
        "mtp": _settings("mtp", 1),
    }
    argvs = [[str(tiny), "--max-model-len", "512", *vllm_speculative_args(s, tp=1)] for s in cases.values()]
    got = dict(zip(cases, run_parser(python, "vllm_speculative.py", argvs, tmp_path), strict=True))
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
    python = venv_python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    cases = {
        "ngram": _settings("ngram", 4),
        "eagle3": _settings("eagle3", 3, "/models/eagle3-head"),
        "mtp": _settings("mtp", 2),
        "standalone": _settings("draft_model", 5, "/models/draft"),
    }
    argvs = [["--model-path", "/models/tiny", *sglang_speculative_args(s)] for s in cases.values()]
    got = dict(zip(cases, run_parser(python, "sglang_parse.py", argvs, tmp_path), strict=True))
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
