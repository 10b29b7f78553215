"""Run inside the vLLM venv: does vLLM's EngineArgs(...).create_engine_config() accept each layout?

argv[1] = model directory, argv[2] = output JSON file; stdin = JSON list of [tp, pp, dp]. Nothing is
started: the config step checks the sizes against the model's config.json.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs

    results = []
    for tp, pp, dp in json.load(sys.stdin):
        args = EngineArgs(model=sys.argv[1], tensor_parallel_size=tp, pipeline_parallel_size=pp,
                          data_parallel_size=dp, max_model_len=512)
        try:
            args.create_engine_config()
        except Exception as exc:  # pydantic ValidationError or ValueError, depending on the check
            results.append({"ok": False, "error": str(exc).splitlines()[1 if "\n" in str(exc) else 0]})
            continue
        results.append({"ok": True, "error": ""})
    with open(sys.argv[2], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
