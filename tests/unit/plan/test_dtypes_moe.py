import pytest

from orchestrator.plan.dtypes import kv_bytes_per_value, weight_bytes_per_value
from orchestrator.plan.moe import all_to_all_bytes_per_layer, touched_fraction


def test_touched_fraction() -> None:
    assert touched_fraction(8, 2, 16) == pytest.approx(0.99, abs=0.01)
    assert touched_fraction(64, 6, 32) == pytest.approx(0.957, abs=0.002)
    assert touched_fraction(256, 8, 64) == pytest.approx(0.869, abs=0.002)


def test_all_to_all_bytes() -> None:
    assert all_to_all_bytes_per_layer(1, 8, 7168, 2.0) == 8 * 7168 * 2


def test_dtypes() -> None:
    assert weight_bytes_per_value("bf16") == 2.0
    assert weight_bytes_per_value("int4", 128) == pytest.approx(0.5 + 2 / 128)
    assert kv_bytes_per_value("fp8") == 1.0
