"""`orch bench` against `vllm bench serve` on one vLLM-on-CPU server: TTFT, TPOT and ITL side by side.

The setup (same prompts, same constant pace, one request in flight, a server tokenizer that streams
one token per chunk) is tests/support/vllm_pair.py's, shared with the vllm_cpu test that asserts
the load-independent part (same counts, metrics reproducible from the records, no client below the
server's own latencies). This prints the timing part, which depends on how busy the machine is:
rounds of both clients interleaved (the order alternating), each refereed by the server's /metrics
histograms and a wire tap (a TCP relay that notes the TTFT on the wire), then the medians over rounds
with orch/vllm ratios and each client's excess over the wire. Prints; asserts nothing.

Run: ORCH_VLLM_PYTHON=<vllm-cpu venv>/bin/python python bench/vllm_agreement.py [--rounds 5] [--requests 40]
(`source .ci/setup.d/20-vllm-cpu.sh` builds that venv and sets the variable.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repo, for tests.support
from tests.support.vllm_pair import (
    Figures,
    N,
    WireTap,
    our_figures,
    run_ours,
    run_theirs,
    scrape,
    server_means,
    their_figures,
    vllm_server,
)


def _refereed(url: str, tap: WireTap, name: str, n: int, run: Callable[[], Figures]) -> Figures:
    before = scrape(url)
    tap.take()
    fig = run()
    wire = tap.take()[-n:]  # vLLM's client sends one test request first
    fig["wire_ttft"] = statistics.median(wire) if wire else float("nan")
    means, _ = server_means(before, scrape(url))
    print(f"  {name}: " + " ".join(f"{k} {v:.2f}" for k, v in fig.items())
          + f" | wire streams {len(wire)}/{n} | server means: ttft {means.get('ttft', 0):.2f}"
          f" e2e {means.get('e2e', 0):.2f} (ms)", flush=True)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=N)
    args = ap.parse_args()
    python = os.environ.get("ORCH_VLLM_PYTHON")
    if not python:
        sys.exit("set ORCH_VLLM_PYTHON to the vllm-cpu venv's python (source .ci/setup.d/20-vllm-cpu.sh)")
    n = args.requests
    ours: list[Figures] = []
    theirs: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="orch-agree-") as d:
        tmp = Path(d)
        with vllm_server(python, tmp, n) as (url, model, prompts):
            tap = WireTap(int(url.rsplit(":", 1)[1]))
            tapped = f"http://127.0.0.1:{tap.port}"
            for k in range(args.rounds):
                seed = k + 1
                print(f"round {k + 1}/{args.rounds} (load average {os.getloadavg()[0]:.1f}):", flush=True)

                def run_o(seed: int = seed) -> Figures:
                    out = tmp / f"orch-{seed}.jsonl"
                    return our_figures(*run_ours(python, tapped, model, prompts, seed, out, n))

                def run_t(seed: int = seed) -> Figures:
                    out = tmp / f"vllm-{seed}.json"
                    return their_figures(run_theirs(python, tapped, model, prompts, seed, out, n))

                order = [("orch", run_o, ours), ("vllm", run_t, theirs)]
                for name, run, sink in order if k % 2 == 0 else order[::-1]:  # a drift hits both alike
                    sink.append(_refereed(url, tap, name, n, run))
            tap.close()
    print(f"medians over {args.rounds} rounds (orch / vllm bench serve):")
    for key in ("ttft", "tpot", "itl", "e2e_mean"):
        a = statistics.median(o[key] for o in ours)
        b = statistics.median(t[key] for t in theirs)
        print(f"  {key:9s} orch {a:8.3f} ms  vllm {b:8.3f} ms  ratio {a / b:.3f} ({(a - b) / b:+.1%})")
    wire_o = statistics.median(o["wire_ttft"] for o in ours)
    wire_t = statistics.median(t["wire_ttft"] for t in theirs)
    a = statistics.median(o["ttft"] for o in ours)
    b = statistics.median(t["ttft"] for t in theirs)
    print(f"  wire TTFT during orch {wire_o:.3f} ms, during vllm {wire_t:.3f} ms; client excess over the "
          f"wire: orch {a - wire_o:+.3f} ms ({a / wire_o:.3f}x), "
          f"vllm {b - wire_t:+.3f} ms ({b / wire_t:.3f}x)")
    print(f"  vllm ITL median > 0.5 ms (streams really streamed, not starved into one read): "
          f"{statistics.median(t['itl'] for t in theirs) > 0.5}")


if __name__ == "__main__":
    main()
