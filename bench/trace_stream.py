"""Reading a long trace costs what the requests used cost, not what the file holds.

    python bench/trace_stream.py [--lines 10000000] [--use 200] [--baseline-lines 1000000]

Writes a Mooncake-format trace of --lines lines (kept under $TMPDIR between runs), then, each in a fresh
Python process: (1) orch's streamed reader builds the first --use requests (prompts included) as
`orch bench --workload trace --num-requests N` does before its first send; (2) the way orch read traces
before (the whole file read and parsed, then the first N taken) on the first --baseline-lines lines of
the same file (the whole 10-million-line file would need over 10 GB that way). Prints wall time and peak
RSS side by side, and their ratios. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STREAMED = """
import resource, sys, time
t0 = time.perf_counter()
from orchestrator.loadgen.workloads import trace_workload
t1 = time.perf_counter()
w = trace_workload(sys.argv[1], n=int(sys.argv[2]))
t = time.perf_counter() - t1
print(len(w.specs), t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, t1 - t0)
"""

# orch before the streamed reader: read_text().splitlines(), one json.loads per line, sort, take N
WHOLE_FILE = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
rows = []
for line in Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()[: int(sys.argv[3])]:
    o = json.loads(line)
    rows.append((float(o["timestamp"]), int(o["input_length"]), int(o["output_length"]), o["hash_ids"]))
rows.sort(key=lambda r: r[0])
rows = rows[: int(sys.argv[2])]
t = time.perf_counter() - t0
print(len(rows), t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0.0)
"""


def make_trace(path: Path, lines: int) -> None:
    rng = random.Random(0)
    tmp = path.with_suffix(".part")
    t, next_id = 0, 10_000
    with tmp.open("w") as f:
        for _ in range(lines):
            t += rng.randint(0, 40)
            n_blocks = rng.randint(1, 12)
            shared = rng.randint(0, n_blocks)
            ids = list(range(shared)) + list(range(next_id, next_id + n_blocks - shared))
            next_id += n_blocks - shared
            n_in = 512 * (n_blocks - 1) + rng.randint(1, 512)
            f.write(json.dumps({"timestamp": t, "input_length": n_in, "output_length": rng.randint(1, 500),
                                "hash_ids": ids}) + "\n")
    tmp.rename(path)


def run(code: str, *args: object) -> tuple[int, float, float, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]), float(out[3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=10_000_000)
    p.add_argument("--use", type=int, default=200)
    p.add_argument("--baseline-lines", type=int, default=1_000_000)
    args = p.parse_args()
    path = Path(tempfile.gettempdir()) / f"orch-bench-mooncake-{args.lines}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        make_trace(path, args.lines)
        print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s")
    n_s, t_s, rss_s, imports_s = run(STREAMED, path, args.use)
    n_b, t_b, rss_b, _ = run(WHOLE_FILE, path, args.use, args.baseline_lines)
    print(f"(importing orch's load generator took {imports_s:.2f} s before the streamed read; the peak RSS "
          "includes it)")
    print(f"{'reader':<44} {'requests':>8} {'wall s':>8} {'peak RSS MB':>12}")
    for name, n, t, rss in ((f"streamed, first {args.use} of {args.lines:,} lines", n_s, t_s, rss_s),
                            (f"whole file, first {args.baseline_lines:,} lines only", n_b, t_b, rss_b)):
        print(f"{name:<44} {n:>8} {t:>8.3f} {rss:>12.1f}")
    print(f"ratio whole/streamed: wall {t_b / t_s:.1f}x, peak RSS {rss_b / rss_s:.1f}x "
          f"(the whole-file reader on all {args.lines:,} lines would take about "
          f"{args.lines / args.baseline_lines:.0f}x its numbers)")


if __name__ == "__main__":
    main()
