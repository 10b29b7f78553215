"""Run inside the light SGLang venv: does SGLang's `prepare_server_args` read orch's speculative flags?

stdin: a JSON list of argv lists (without the program); writes a JSON list of {"ok", "error", "args"} to
argv[1], `args` holding the speculative fields as SGLang parsed them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

FIELDS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_num_draft_tokens", "speculative_draft_model_path", "speculative_ngram_max_bfs_breadth",
          "speculative_ngram_min_bfs_breadth", "max_running_requests")


def main() -> None:
    from sglang.srt.server_args import prepare_server_args

    results = []
    for argv in json.load(sys.stdin):
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
        results.append({"ok": True, "error": "", "args": {f: getattr(args, f, None) for f in FIELDS}})
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
