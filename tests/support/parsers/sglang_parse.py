"""Run inside the light SGLang venv: parse each argv with SGLang's own `prepare_server_args`.

Reads a JSON list of argv lists (without the leading `python3 -m sglang.launch_server`) on stdin; writes
a JSON list of {"ok": bool, "error": str, "args": {...}} to the file named by argv[1].
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

FIELDS = (
    "model_path", "tp_size", "pp_size", "dp_size", "attn_dp_size", "ep_size", "enable_eplb",
    "ep_num_redundant_experts", "moe_a2a_backend", "nnodes", "node_rank", "dist_init_addr", "host", "port",
    "enable_metrics", "context_length", "max_running_requests", "chunked_prefill_size",
    "mem_fraction_static", "kv_cache_dtype", "quantization", "served_model_name", "base_gpu_id",
    "page_size", "disable_radix_cache", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path",
    "speculative_ngram_max_bfs_breadth", "speculative_ngram_min_bfs_breadth",
)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def main() -> None:
    from sglang.srt.server_args import prepare_server_args

    cases = json.load(sys.stdin)
    results = []
    for argv in cases:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = prepare_server_args(argv)
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-800:]})
            continue
        except Exception as exc:
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        results.append({"ok": True, "args": {k: _plain(getattr(args, k, None)) for k in FIELDS}})
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
