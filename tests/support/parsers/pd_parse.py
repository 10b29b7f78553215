"""Run inside an engine's venv: parse prefill/decode argv with the engine's own parser.

argv[1]: "vllm" or "sglang"; argv[2]: the output file. Reads a JSON list of argv lists (without the
program) on stdin; writes a JSON list of {"ok": bool, "error": str, "args": {...}} with the
disaggregation fields as the engine parsed them (vLLM: its KVTransferConfig; SGLang: its ServerArgs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from typing import Any

SGLANG_FIELDS = ("disaggregation_mode", "disaggregation_transfer_backend", "disaggregation_bootstrap_port",
                 "disaggregation_ib_device", "tp_size", "attn_dp_size", "pp_size", "port")


def _vllm(argv: list[str]) -> dict[str, Any]:
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = serve.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv)
    serve.validate_parsed_serve_args(args)
    config = args.kv_transfer_config
    kv = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)} if config is not None else None
    return {"kv_transfer_config": kv, "tensor_parallel_size": args.tensor_parallel_size,
            "pipeline_parallel_size": args.pipeline_parallel_size}


def _sglang(argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)
    return {k: getattr(args, k, None) for k in SGLANG_FIELDS}


def main() -> None:
    parse = _vllm if sys.argv[1] == "vllm" else _sglang
    results = []
    for argv in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                results.append({"ok": True, "args": parse(argv)})
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-800:]})
        except Exception as exc:  # the validators raise plain exceptions for bad combinations
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    with open(sys.argv[2], "w") as out:
        json.dump(results, out, default=str)


if __name__ == "__main__":
    main()
