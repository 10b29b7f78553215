"""CLI speed: start-up and whole-command cost of the quick commands, and `orch simulate` at scale.

Each command runs as its own process (as a user runs it); measured from the kernel's accounting of
that process alone (os.wait4): CPU seconds (user + system), wall seconds and peak memory (max RSS).
Quick commands: best of --repeats; their ratio is to a bare `python -c pass` of the same interpreter
(start-up floor). `orch simulate` of 100,000 (and --million: 1,000,000) requests is set beside the
simulator core on the same requests (engines stepping in virtual time, nothing else: no workload
generation, no metrics, no printing), timed in-process. Goals (issue 29): validate/plan start-up
under 0.3 s, the 1,024-GPU DeepSeek-V3 plan under 0.5 s, simulate 100,000 requests under 5 CPU s and
300 MB, 1,000,000 under a minute.
Run: .venv/bin/python bench/cli_speed.py [--repeats 5] [--million] [--against DIR]
--against DIR: the same commands with another checkout's orchestrator package (PYTHONPATH), interleaved
with this tree's runs, CPU seconds side by side (the machine is shared: compare in one run).
Bytecode: every process runs with a bytecode cache (PYTHONPYCACHEPREFIX, a temporary folder, filled by
a first run that is not counted), as an installed orch runs: pip compiles a wheel's modules, and an
editable install writes __pycache__ on first use. PYTHONDONTWRITEBYTECODE, set on some machines (this
one), would otherwise make every start compile orch's sources again (about 0.05 s more per command);
--cold measures that way.
Prints a table; asserts nothing. Wall times include whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORCH = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
QWEN = str(ROOT / "layouts" / "qwen72b.yaml")
DEEPSEEK_1024 = """model: {name: deepseek-v3, weight_dtype: fp8, max_model_len: 32768}
hardware: {gpu: h200, nodes: 128}
workload: {rates_per_s: [4], num_requests: 100}
layouts: [dp32ep]
"""
SIM_ARGS = ["--layouts", "tp8", "--rates", "8", "--json"]


ENV = dict(os.environ)  # the processes' environment: main() sets the bytecode cache


# A checkout to run: its processes' environment and working directory (`python -c` puts the working
# directory first on sys.path, so each tree's processes run in that tree's root).
Tree = tuple[dict[str, str], Path]


def run(argv: list[str], tree: Tree | None = None) -> tuple[float, float, float, int]:
    """(CPU s, wall s, max RSS MB, exit code) of one process."""
    env, cwd = tree or (ENV, ROOT)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss / 1024, proc.returncode


Result = tuple[float, float, float, int]


def best(argv: list[str], repeats: int, envs: list[Tree]) -> list[Result]:
    """Best of `repeats` per environment (this tree, and the --against tree), runs interleaved so that
    both see the same load."""
    for env in envs:
        run(argv, env)  # fills the bytecode cache; not counted
    runs: list[list[Result]] = [[] for _ in envs]
    for _ in range(repeats):
        for k, env in enumerate(envs):
            runs[k].append(run(argv, env))
    return [(min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs), rs[-1][3]) for rs in runs]


CORE = """
import sys, time
from orchestrator.layout import parse_layout
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.sim.run import sim_requests, spec_engines
try:  # sim/loops.py since sim/virtual.py was split; an older --against tree has it in sim/virtual.py
    from orchestrator.sim.loops import simulate_columns
except ImportError:
    from orchestrator.sim.virtual import simulate_columns
spec = load_checked_spec(sys.argv[1])
n = int(sys.argv[2])
reqs = sim_requests(spec, 8.0, n)
engines = spec_engines(spec, plan_inputs(spec), parse_layout("tp8"))
t0 = time.process_time()
simulate_columns(engines, reqs, max_concurrency=spec.workload.max_concurrency)
print(time.process_time() - t0)
"""


def core_cpu_s(n: int, tree: Tree) -> float:
    """CPU seconds of the simulator core alone on the requests `orch simulate` sends."""
    out = subprocess.run([sys.executable, "-c", CORE, QWEN, str(n)], capture_output=True, text=True,
                         check=True, cwd=tree[1], env=tree[0])
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--million", action="store_true", help="also simulate 1,000,000 requests (a minute)")
    ap.add_argument("--cold", action="store_true",
                    help="no bytecode cache: compile the sources at every start")
    ap.add_argument("--against", metavar="DIR",
                    help="another checkout of orch (e.g. git worktree add /tmp/base main): each command "
                         "also runs with its orchestrator package, interleaved, and the CPU seconds are "
                         "printed side by side")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        if a.cold:
            ENV["PYTHONDONTWRITEBYTECODE"] = "1"
            ENV["PYTHONPYCACHEPREFIX"] = str(Path(d, "none"))  # empty: nothing is read from a cache
        else:
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = str(Path(d, "pycache"))
        envs: list[Tree] = [(ENV, ROOT)]
        if a.against:
            other = str(Path(a.against).resolve())
            if not Path(other, "orchestrator", "__init__.py").is_file():
                sys.exit(f"--against {a.against}: no orchestrator package there")
            path = os.pathsep.join(filter(None, [other, ENV.get("PYTHONPATH")]))
            envs.append(({**ENV, "PYTHONPATH": path}, Path(other)))
        deepseek = str(Path(d, "deepseek-1024.yaml"))
        Path(deepseek).write_text(DEEPSEEK_1024)
        base = best([sys.executable, "-c", "pass"], a.repeats, envs[:1])[0]
        rows: list[tuple[str, list[Result], str]] = [("python -c pass", [base] * len(envs), "")]
        for label, argv, goal in (
            ("orch validate qwen72b.yaml", [*ORCH, "validate", QWEN], "< 0.3 s"),
            ("orch plan qwen72b.yaml", [*ORCH, "plan", QWEN], "< 0.3 s"),
            ("orch plan deepseek-v3, 1,024 H200", [*ORCH, "plan", deepseek], "< 0.5 s"),
            ("orch --help", [*ORCH, "--help"], ""),
        ):
            rows.append((label, best(argv, a.repeats, envs), goal))
        sims = [(100_000, "< 5 CPU s, 300 MB")] + ([(1_000_000, "< 60 s")] if a.million else [])
        core: dict[int, list[float]] = {}
        for n, goal in sims:
            results: list[Result] = []
            core[n] = []
            for env in envs:
                run([sys.executable, "-c", "import orchestrator.cli.sim_cmd, orchestrator.sim.virtual"], env)
                results.append(run([*ORCH, "simulate", QWEN, *SIM_ARGS, "--num-requests", str(n)], env))
                core[n].append(core_cpu_s(n, env))
            rows.append((f"orch simulate tp8, {n:,} requests", results, goal))
    against = f" {'CPU s against':>13} {'ratio':>6}" if a.against else ""
    print(f"{'command':<36} {'CPU s':>7} {'wall s':>7} {'max RSS MB':>11} {'CPU / python':>13} "
          f"{'CPU / sim core':>15}{against}  goal")
    for label, res, goal in rows:
        cpu, wall, rss, code = res[0]
        size = next((k for k in core if f"{k:,} requests" in label), None)
        vs_core = f"{cpu / core[size][0]:.2f}" if size else "-"
        failed = f"  (exit {code})" if code not in (0, 3, 7) else ""
        side = f" {res[1][0]:>13.3f} {cpu / res[1][0]:>6.2f}" if a.against else ""
        print(f"{label:<36} {cpu:>7.3f} {wall:>7.3f} {rss:>11.0f} {cpu / base[0]:>13.1f} "
              f"{vs_core:>15}{side}  {goal}{failed}")
    for count, c in core.items():
        side = f" (against: {c[1]:.2f}, ratio {c[0] / c[1]:.2f})" if a.against else ""
        print(f"simulator core alone, {count:,} requests: {c[0]:.2f} CPU s{side}")
    if a.against:
        print(f"against: {a.against} (ratio = this tree's CPU s / that one's)")
    cache = "no bytecode cache" if a.cold else "bytecode cached"
    print(f"best of {a.repeats} for the quick commands ({cache}); load average {load0:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
