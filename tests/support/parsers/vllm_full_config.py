"""Run inside the vLLM venv: vLLM's whole config step over each argv, as `vllm serve` would run it.

stdin: a JSON list of {"argv": [...] (without the leading `vllm serve`), "model": DIR}; the model
positional is replaced by DIR, a tiny checkpoint with the shapes the layout needs. Each argv goes through
the serve parser and validator, then EngineArgs.from_cli_args(...).create_engine_config(), which checks
the parallel sizes against the model's config and each other without starting anything. A case with
"kwargs" instead of "argv" (a Ray Serve LLMConfig's engine_kwargs) runs EngineArgs(model=DIR, **kwargs).
Writes a JSON list of {"ok": bool, "error": str, "config": {...}} to argv[1].
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def _parallel(cfg: Any) -> dict[str, Any]:
    p = cfg.parallel_config
    names = (
        "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local",
        "data_parallel_rank", "world_size", "enable_expert_parallel", "enable_eplb", "nnodes", "node_rank",
    )
    out = {n: getattr(p, n, None) for n in names}
    eplb = getattr(p, "eplb_config", None)
    out["num_redundant_experts"] = getattr(eplb, "num_redundant_experts", None)
    out["served_model_name"] = getattr(cfg.model_config, "served_model_name", None)
    return {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for k, v in out.items()}


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    results = []
    for case in json.load(sys.stdin):
        err = io.StringIO()
        try:
            if "kwargs" in case:
                engine_args = EngineArgs(model=case["model"], **case["kwargs"])
            else:
                parser = serve.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
                with contextlib.redirect_stderr(err):
                    args = parser.parse_args([case["model"], *case["argv"][1:]])
                    serve.validate_parsed_serve_args(args)
                args.model = args.model_tag  # what `vllm serve` does with the positional
                engine_args = EngineArgs.from_cli_args(args)
            cfg = engine_args.create_engine_config()
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-800:]})
            continue
        except Exception as exc:  # pydantic ValidationError, ValueError, ...: the check that failed
            text = str(exc).strip()
            results.append({"ok": False, "error": f"{type(exc).__name__}: {text[:800]}"})
            continue
        results.append({"ok": True, "error": "", "config": _parallel(cfg)})
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
