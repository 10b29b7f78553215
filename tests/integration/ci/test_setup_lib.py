"""The CI's shared-cache mechanics (.ci/lib.sh), with a stand-in tier: two setups started together build
it once and both use it; a build that fails half-way makes nothing visible, exports nothing and returns
non-zero, even when the caller ignores errors (an interactive shell, an `if`); a build killed earlier
leaves nothing that is used or kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.paths import ROOT

LIB = ROOT / ".ci" / "lib.sh"

# A tier whose build takes a moment, counts its builds, and fails at step 2 when FAIL is set.
SETUP = """
source {lib}
_build_fake() {{
    local dir="$1"
    echo built >> "$ORCH_CI_ROOT/builds.log"
    sleep 1
    echo one > "$dir/a"
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
    return subprocess.Popen(["bash", "-c", SETUP.format(lib=LIB) + script], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(root), "ORCH_CI_ROOT": str(root),
                                 **env})


def test_two_setups_started_together_build_once_and_both_use_it(tmp_path: Path) -> None:
    script = 'setup_fake; echo "rc=$? var=${ORCH_FAKE:-unset}"; cat "$ORCH_FAKE"'
    procs = [_bash(tmp_path, script) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for out in outs:
        assert f"rc=0 var={tmp_path}/fake-1234/b" in out and out.strip().endswith("two"), out
    assert (tmp_path / "builds.log").read_text().count("built") == 1  # the second waited and reused
    assert (tmp_path / "fake-1234").is_symlink() and (tmp_path / "fake-1234" / ".ok").is_file()


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


def test_a_build_killed_earlier_is_neither_used_nor_kept(tmp_path: Path) -> None:
    dead = tmp_path / "fake-1234.build.dead00"
    dead.mkdir()
    (dead / "a").write_text("half")
    out = _bash(tmp_path, 'setup_fake; echo "rc=$?"').communicate(timeout=120)[0]
    assert "rc=0" in out, out
    assert not dead.exists()
    assert (tmp_path / "fake-1234").resolve() != dead
    assert (tmp_path / "fake-1234" / "b").read_text() == "two\n"
