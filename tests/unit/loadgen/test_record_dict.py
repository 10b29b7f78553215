"""RequestRecord.to_dict is dataclasses.asdict without the deep copy: the same keys, order and values."""

from __future__ import annotations

from dataclasses import asdict, fields

from orchestrator.loadgen.records import RequestRecord


def test_to_dict_is_asdict() -> None:
    rec = RequestRecord("r1", 0.5, 0.6, 2.0, (1.0, 1.5), (1, 3), output_tokens=4, prompt_tokens=9,
                        error=None, queued_s=0.1, extra={"preemptions": "1"})
    assert rec.to_dict() == asdict(rec)
    assert list(rec.to_dict()) == [f.name for f in fields(RequestRecord)]
    failed = RequestRecord("r2", 0.0, 0.0, None, error="http_400")
    assert failed.to_dict() == asdict(failed)
