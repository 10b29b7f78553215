import json
from pathlib import Path

from tests.support.cli import Orch


def test_catalog_json_lists_presets_with_counted_params(orch: Orch) -> None:
    result = orch("catalog", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    models = {m["name"]: m for m in data["models"]}
    assert len(models) >= 21  # orchestrator/catalog/models (SOURCES.md)
    assert abs(models["qwen2.5-72b"]["total_params"] / 72.7e9 - 1) < 0.01
    assert models["mixtral-8x7b"]["active_params"] < models["mixtral-8x7b"]["total_params"]
    assert {g["name"] for g in data["gpus"]} >= {"h100-sxm", "h200"}


def test_catalog_table_and_unknown_command(orch: Orch) -> None:
    table = orch("catalog")
    assert table.returncode == 0, table.stderr
    assert "qwen2.5-72b" in table.stdout and "vendor datasheet" in table.stdout
    bad = orch("no-such-command")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


def test_schema_and_validate(tmp_path: Path, orch: Orch) -> None:
    schema = orch("schema")
    assert schema.returncode == 0 and json.loads(schema.stdout)["type"] == "object"
    ok = orch("validate", "layouts/qwen72b.yaml")
    assert ok.returncode == 0 and "tp8, tp4x2, tp2x4" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {name: x}\nhardware: {gpu: h100, nodez: 2}\n")
    result = orch("validate", str(bad))
    assert result.returncode == 2
    assert "bad.yaml:2: hardware.nodez: unknown field; did you mean 'nodes'?" in result.stderr
    assert "Traceback" not in result.stderr
