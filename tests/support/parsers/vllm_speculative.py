"""Run inside the vLLM venv: does vLLM's config step read orch's `--speculative-config` as meant?

stdin: a JSON list of argv lists without the leading `vllm serve` (the model positional first). Each goes
through the serve parser and validator, then EngineArgs.from_cli_args(...).create_engine_config(), which
builds SpeculativeConfig against the model (and the draft) without starting anything. Writes a JSON list
of {"ok": bool, "error": str, "speculative": {...}} to argv[1].
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

FIELDS = ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
          "draft_tensor_parallel_size", "model")


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    results = []
    for argv in json.load(sys.stdin):
        err = io.StringIO()
        try:
            parser = serve.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
                serve.validate_parsed_serve_args(args)
            args.model = args.model_tag  # what `vllm serve` does with the positional
            spec = EngineArgs.from_cli_args(args).create_engine_config().speculative_config
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-800:]})
            continue
        except Exception as exc:  # ValidationError, ValueError, NotImplementedError: the check that failed
            results.append({"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip()[:800]}"})
            continue
        got = {f: getattr(spec, f, None) for f in FIELDS} if spec is not None else {}
        plain = {k: v if isinstance(v, (int, str)) or v is None else str(v) for k, v in got.items()}
        results.append({"ok": True, "error": "", "speculative": plain})
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
