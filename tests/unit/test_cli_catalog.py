import json
import subprocess
import sys


def _orch(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from orchestrator.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_catalog_json_lists_presets_with_counted_params() -> None:
    result = _orch("catalog", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    models = {m["name"]: m for m in data["models"]}
    assert len(models) == 10
    assert abs(models["qwen2.5-72b"]["total_params"] / 72.7e9 - 1) < 0.01
    assert models["mixtral-8x7b"]["active_params"] < models["mixtral-8x7b"]["total_params"]
    assert {g["name"] for g in data["gpus"]} >= {"h100-sxm", "h200"}


def test_catalog_table_and_unknown_command() -> None:
    table = _orch("catalog")
    assert table.returncode == 0, table.stderr
    assert "qwen2.5-72b" in table.stdout and "vendor datasheet" in table.stdout
    bad = _orch("no-such-command")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
