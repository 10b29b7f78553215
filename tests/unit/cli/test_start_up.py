"""What the quick commands load: `orch validate` and `orch plan` of a dense model through the real main()
import neither numpy nor the load generator nor the simulator (and `--json`, `validate` not rich either),
read the one calibration profile their spec's GPU and engine use, and main() called in-process leaves
the garbage collector as it found it. Module presence only: start-up time is measured by
bench/cli_speed.py, never asserted here."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

QWEN = str(ROOT / "layouts" / "qwen72b.yaml")  # dense, sim engine (vLLM's scheduler) on H100 SXM
MIXTRAL = str(ROOT / "layouts" / "mixtral.yaml")  # MoE: expert popularity needs numpy

# Runs orch's main() as the console script does, then reports what it loaded.
PROBE = """
import json, sys
import orchestrator.catalog.profiles as profiles
read = []
real = profiles.load_profile
def recording(ref):
    read.append(ref)
    return real(ref)
profiles.load_profile = recording
sys.argv = ["orch", *sys.argv[1:]]
from orchestrator.cli import main
try:
    main()
except SystemExit as done:
    code = done.code
watched = ("numpy", "rich", "asyncio", "aiohttp", "plotly", "orchestrator.loadgen", "orchestrator.sim",
           "orchestrator.store", "orchestrator.deploy")
print(json.dumps({"code": code, "profiles": read, "loaded": [m for m in watched if m in sys.modules]}),
      file=sys.stderr)
"""


def _probe(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=False)
    report: dict[str, object] = json.loads(out.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), out.stderr[-2000:]
    assert out.stdout.strip(), out.stderr[-2000:]
    return report


@pytest.mark.parametrize(("args", "loaded"), [
    (("validate", QWEN), []),
    (("plan", QWEN, "--json"), []),
    (("plan", QWEN), ["rich"]),  # the tables
    (("plan", MIXTRAL, "--json"), ["numpy"]),  # expert popularity, and nothing else
])
def test_quick_commands_load_only_what_they_use(args: tuple[str, ...], loaded: list[str]) -> None:
    report = _probe(*args)
    assert report["loaded"] == loaded
    # The bundled profile of the spec's GPU and engine family only, not every profile's YAML.
    assert report["profiles"] == ["vllm-h100-sxm"]


def test_main_in_process_leaves_the_collector_as_it_found_it(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # main() pauses collection while a command's modules import and freezes them; a caller (a test, a
    # tool embedding orch) gets its collector back enabled or disabled as it was, and nothing frozen.
    from orchestrator.cli import main

    monkeypatch.setattr(sys, "argv", ["orch", "plan", QWEN, "--json"])
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with pytest.raises(SystemExit) as done:
                main()
            assert done.value.code == 0
            assert json.loads(capsys.readouterr().out)["model"] == "qwen2.5-72b"
            assert gc.isenabled() is enabled and gc.get_freeze_count() == 0
    finally:
        (gc.enable if was else gc.disable)()
