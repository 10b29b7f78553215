"""`python -m orchestrator.sim.server`: an OpenAI-compatible streaming server backed by EngineCore.

The process: flags (sim/server_flags.py) -> a SimServer (sim/serving.py: the engines' loops, the OpenAI
API, /health and /metrics) -> listening on --host:--port until a signal, with overload logged as counts
(sim/log_limit.py). SimServer, build_app, parse_args and server_from_args are importable from here too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from aiohttp import web

from orchestrator.errors import OrchError, SpecError
from orchestrator.sim.log_limit import LogLimiter, loop_handler, raise_open_file_limit
from orchestrator.sim.log_limit import install as install_log_limit
from orchestrator.sim.server_flags import parse_args, server_from_args
from orchestrator.sim.serving import SimServer, build_app

__all__ = ["SimServer", "build_app", "main", "parse_args", "server_from_args"]


def main(argv: Sequence[str] | None = None) -> None:
    import sys

    args = parse_args(argv)
    try:
        server = server_from_args(args)
    except OrchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    # One line once the port is bound, so a person starting it by hand knows where it listens.
    ready = (f"orch sim serve: {args.served_model_name or args.model} {args.layout} on {args.gpu}, "
             f"OpenAI API at http://{args.host}:{args.port}/v1 (health /health, metrics /metrics)")
    limiter = LogLimiter()
    install_log_limit(limiter)  # overload: one line per kind of trouble and counts, never a flood
    raise_open_file_limit()
    app = build_app(server)

    async def quiet_loop(_: web.Application) -> None:
        asyncio.get_running_loop().set_exception_handler(loop_handler(limiter))

    async def last_counts(_: web.Application) -> None:
        limiter.flush()

    app.on_startup.append(quiet_loop)
    app.on_cleanup.append(last_counts)
    try:
        web.run_app(app, host=args.host, port=args.port, access_log=None, handle_signals=True,
                    print=lambda _: print(ready, file=sys.stderr, flush=True))
    except OSError as exc:  # the port is taken, the host is not this machine's ...
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"error: cannot listen on {args.host}:{args.port}: {why}; "
              "choose another --port (or --host)", file=sys.stderr)
        sys.exit(SpecError.exit_code)


if __name__ == "__main__":
    main()
