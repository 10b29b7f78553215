"""Load a sweep spec from YAML with errors that name the file, the line, the field path and a fix."""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import SpecError
from orchestrator.spec.models import SweepSpec

_Path = tuple[str | int, ...]


def _line_map(node: yaml.Node, path: _Path, out: dict[_Path, int]) -> None:
    """Record the 1-based line of every mapping key and sequence item below node."""
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*path, str(key_node.value))
            out[child] = key_node.start_mark.line + 1
            _line_map(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, index), out)


def _data_path(loc: tuple[str | int, ...], data: Any) -> _Path:
    """Pydantic locations carry union labels ('int', 'kubernetes'); keep only the parts found in the data."""
    out: list[str | int] = []
    cur = data
    for part in loc:
        in_dict = isinstance(cur, dict) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        if in_dict or in_list:
            cur = cur[part]
            out.append(part)
    return tuple(out)


def _model_at(path: _Path, data: Any) -> type[BaseModel] | None:
    """The pydantic model class that owns the mapping at path (for 'did you mean' suggestions)."""
    model: type[BaseModel] | None = SweepSpec
    cur = data
    for part in path:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        cur = cur.get(part) if isinstance(cur, dict) else None
        model = _model_class(field.annotation, cur)
    return model


def _model_class(annotation: Any, value: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_class(arg, value)
        if found is None:
            continue
        kind = found.model_fields.get("kind")
        if kind is None or not isinstance(value, dict) or "kind" not in value:
            return found
        if value["kind"] in getattr(kind.annotation, "__args__", ()):
            return found
    return None


def _dotted(path: _Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _message(err: Any, path: _Path, data: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        name = str(path[-1]) if path else "?"
        owner = _model_at(path[:-1], data)
        known = list(owner.model_fields) if owner else []
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(known)}"
        return f"unknown field; {hint}"
    if kind == "missing":
        return "required field is missing"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    return msg


def _first_error(exc: ValidationError, data: Any, lines: dict[_Path, int], source: str) -> SpecError:
    errors = exc.errors()
    # Prefer an error on a real field over union-branch noise: the one with the deepest data path.
    best = max(errors, key=lambda e: len(_data_path(e["loc"], data)))
    loc = tuple(best["loc"])
    path = _data_path(loc, data)
    if best["type"] in ("extra_forbidden", "missing") and loc and loc[-1] not in path:
        path = (*path, loc[-1])
    line = lines.get(path) or lines.get(path[:-1]) or 1
    return SpecError(f"{source}:{line}: {_dotted(path)}: {_message(best, path, data)}")


def parse_spec(text: str, source: str = "<spec>") -> SweepSpec:
    """Parse spec YAML text; every problem is one SpecError line `source:line: field.path: what and fix`."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{source}:{line}: YAML syntax error: {problem}") from None
    if not isinstance(data, dict) or node is None:
        raise SpecError(f"{source}:1: a spec must be a YAML mapping with model, hardware, workload, layouts")
    lines: dict[_Path, int] = {}
    _line_map(node, (), lines)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, data, lines, source) from None


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file; pass a spec such as layouts/qwen72b.yaml") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror}") from None
    return _relative_to(parse_spec(text, str(p)), p.parent)


def _relative_to(spec: SweepSpec, spec_dir: Path) -> SweepSpec:
    """A calibration profile named by a relative path is relative to the spec file, not the shell."""
    cal = spec.hardware.calibration
    if cal is None or not (cal.endswith((".yaml", ".yml")) or "/" in cal) or Path(cal).is_absolute():
        return spec
    hardware = spec.hardware.model_copy(update={"calibration": str(spec_dir / cal)})
    return spec.model_copy(update={"hardware": hardware})


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec, for editors and CI validation."""
    return SweepSpec.model_json_schema()


def spec_hash(spec: SweepSpec) -> str:
    """sha256 of the canonical JSON form: equal specs hash equal whatever their YAML formatting."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
