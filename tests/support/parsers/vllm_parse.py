"""Run inside a vLLM venv: parse each argv with vLLM's own `vllm serve` parser and validator.

Reads a JSON list of argv lists (without the leading `vllm serve`) on stdin; writes a JSON list of
{"ok": bool, "error": str, "args": {...}} to the file named by argv[1] (vLLM logs to stdout).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from typing import Any

FIELDS = (
    "model_tag", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    "data_parallel_size_local", "data_parallel_address", "data_parallel_rpc_port", "data_parallel_start_rank",
    "headless", "enable_expert_parallel", "enable_eplb", "eplb_config", "all2all_backend", "nnodes",
    "node_rank", "master_addr", "master_port", "distributed_executor_backend", "host", "port",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_dtype",
    "quantization", "enforce_eager", "served_model_name", "block_size", "enable_chunked_prefill",
    "enable_prefix_caching",
)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def main() -> None:
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cases = json.load(sys.stdin)
    results = []
    for argv in cases:
        parser = serve.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
                serve.validate_parsed_serve_args(args)
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-800:]})
            continue
        except Exception as exc:  # the validator raises plain exceptions for bad combinations
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        results.append({"ok": True, "args": {k: _plain(getattr(args, k, None)) for k in FIELDS}})
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
