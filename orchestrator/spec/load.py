"""Load a sweep spec from YAML with errors that name the file, the line, the field path and a fix."""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import SpecError
from orchestrator.spec.base import FieldError
from orchestrator.spec.files import MAX_SPEC_BYTES, read_user_text
from orchestrator.spec.models import SweepSpec

_Path = tuple[str | int, ...]

# A spec is a few levels deep and a few hundred nodes; these bounds refuse YAML that only an attack or a
# wrong file produces (a "billion laughs" alias bomb expands to 10^9 nodes from a few hundred bytes).
MAX_DEPTH = 32
MAX_NODES = 100_000  # after expanding aliases
MERGE_KEY = "tag:yaml.org,2002:merge"


# libyaml's parser when PyYAML was built with it: 5-10x faster than the pure-Python one, most of
# `orch validate`'s own time. Its errors word things differently, so a text it refuses is parsed
# again by the pure-Python loader, whose messages (and lines) the errors below are written for.
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_events(text: str, source: str, loader: Any = yaml.SafeLoader) -> None:
    """Nesting depth from the event stream: the parser is iterative, so a 10^5-deep list cannot overflow
    the stack here as it would in the recursive composer."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else 1
                raise SpecError(f"{source}:{line}: nested more than {MAX_DEPTH} levels deep; a spec is flat")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_nodes(root: yaml.Node, source: str) -> None:
    """Duplicate keys (an error, not last-wins), recursive aliases, and size and depth once aliases expand."""
    # Per node: (values below it, levels below it) with aliases expanded. Anchors come before their
    # aliases in document order, so an alias finds its target here and the walk never re-descends.
    measured: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()

    def measure(node: yaml.Node) -> tuple[int, int]:
        known = measured.get(id(node))
        if known is not None:
            return known
        line = node.start_mark.line + 1
        if id(node) in open_nodes:
            raise SpecError(f"{source}:{line}: an alias refers to a value that contains it; remove it")
        open_nodes.add(id(node))
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                key_line = key.start_mark.line + 1
                if not isinstance(key, yaml.ScalarNode):
                    raise SpecError(f"{source}:{key_line}: a key must be a plain name")
                if key.tag != MERGE_KEY:
                    if key.value in seen:
                        raise SpecError(
                            f"{source}:{key_line}: key '{key.value}' given twice (first at line "
                            f"{seen[key.value]}); keep one"
                        )
                    seen[key.value] = key_line
                children += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        parts = [measure(child) for child in children]
        open_nodes.discard(id(node))
        total = 1 + sum(n for n, _ in parts)
        height = 1 + max((h for _, h in parts), default=0)
        if total > MAX_NODES:
            raise SpecError(
                f"{source}:{line}: more than {MAX_NODES:,} values once aliases are expanded; "
                "a spec needs far fewer (an alias bomb?)"
            )
        if height > MAX_DEPTH + 1:
            raise SpecError(
                f"{source}:{line}: nested more than {MAX_DEPTH} levels deep once aliases are expanded; "
                "a spec is flat"
            )
        measured[id(node)] = (total, height)
        return total, height

    measure(root)


def _no_nul(data: Any, lines: dict[_Path, int], source: str, path: _Path = ()) -> None:
    """A NUL character cannot reach an argv or an environment (execve refuses it): refuse it here."""
    if isinstance(data, str) and "\x00" in data:
        line = lines.get(path) or 1
        raise SpecError(f"{source}:{line}: {_dotted(path)}: contains a NUL character; remove it")
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and "\x00" in key:
                line = lines.get(path) or 1
                raise SpecError(f"{source}:{line}: {_dotted(path)}: a key contains a NUL character")
            _no_nul(value, lines, source, (*path, str(key)))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            _no_nul(item, lines, source, (*path, index))


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
        if not isinstance(part, int) and not str(part).isprintable():
            part = repr(part)  # a key holding a line break or a control character: keep the error one line
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
    if kind == "union_tag_invalid":  # `target.kind: locl`: the choices and the closest one, in our words
        ctx = err.get("ctx") or {}
        tag = str(ctx.get("tag"))
        expected = [t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip()]
        close = difflib.get_close_matches(tag, expected, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{tag!r} is not one of {', '.join(expected)}{hint}"
    if kind == "union_tag_not_found":
        name = str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'")
        return f"'{name}' is missing; name one (orch schema lists them)"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    return msg


def _rank(err: Any, data: Any) -> tuple[int, int]:
    """Prefer an error on a real field over union-branch noise: the deepest data path first; at equal
    depth, not a type mismatch with one branch of a union ('must be a valid integer' for a mapping
    that was meant as a distribution, whose own error says what is wrong with it)."""
    loc = tuple(err["loc"])
    path = _data_path(loc, data)
    branch_mismatch = len(loc) > len(path) and str(err["type"]).endswith(("_type", "_parsing"))
    return len(path), 0 if branch_mismatch else 1


def _field_path(err: Any) -> _Path | None:
    """The field a model validator named for its error (FieldError), as a data path."""
    cause = (err.get("ctx") or {}).get("error")
    return cause.path if isinstance(cause, FieldError) else None


def _first_error(exc: ValidationError, data: Any, lines: dict[_Path, int], source: str) -> SpecError:
    errors = exc.errors()
    best = max(errors, key=lambda e: _rank(e, data))
    loc = tuple(best["loc"])
    path = _data_path(loc, data)
    named = _field_path(best)
    if named is not None:  # a check across fields that knows which entry is wrong (a repeated layout)
        path = (*path, *named)
    if best["type"] in ("extra_forbidden", "missing") and loc and loc[-1] not in path:
        path = (*path, loc[-1])
    if best["type"] == "union_tag_invalid":
        discriminator = str((best.get("ctx") or {}).get("discriminator", "")).strip("'")
        if discriminator:
            path = (*path, discriminator)
    line = lines.get(path) or lines.get(path[:-1]) or 1
    return SpecError(f"{source}:{line}: {_dotted(path)}: {_message(best, path, data)}")


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with the line of every field, for checks after validation (catalog names ...)."""

    spec: SweepSpec
    source: str
    lines: dict[_Path, int]

    def error(self, field: str, message: str) -> SpecError:
        """`source:line: field: message`, field dotted as in the YAML (`hardware.gpu`)."""
        path = tuple(field.split("."))
        line = next((self.lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in self.lines), 1)
        return SpecError(f"{self.source}:{line}: {field}: {message}")


def _compose(text: str, source: str) -> yaml.Node | None:
    """The node tree, depth checked first: libyaml's parser, or the pure-Python one for its errors."""
    try:
        _check_events(text, source, _FAST_LOADER)
        node: yaml.Node | None = yaml.compose(text, Loader=_FAST_LOADER)
        return node
    except yaml.YAMLError:
        if _FAST_LOADER is yaml.SafeLoader:
            raise
    _check_events(text, source)
    return yaml.compose(text, Loader=yaml.SafeLoader)


def parse_spec(text: str, source: str = "<spec>") -> SweepSpec:
    """Parse spec YAML text; every problem is one SpecError line `source:line: field.path: what and fix`."""
    return parse_spec_lines(text, source).spec


def parse_spec_lines(text: str, source: str = "<spec>") -> LoadedSpec:
    """parse_spec, keeping the line of every field."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{source}: {len(text):,} characters, more than the {MAX_SPEC_BYTES:,} a spec may have"
        )
    try:
        node = _compose(text, source)
        if node is not None:
            _check_nodes(node, source)
        data = yaml.SafeLoader("").construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise SpecError(
            f"{source}:{line}: character #x{exc.character:04x} is not allowed in YAML; remove it"
            if isinstance(exc.character, int)
            else f"{source}:{line}: YAML syntax error: {exc.reason}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError):  # !!python/object and other tags
            raise SpecError(f"{source}:{line}: {problem}; a spec holds plain YAML values only") from None
        raise SpecError(f"{source}:{line}: YAML syntax error: {problem}") from None
    if not isinstance(data, dict) or node is None:
        raise SpecError(f"{source}:1: a spec must be a YAML mapping with model, hardware, workload, layouts")
    lines: dict[_Path, int] = {}
    _line_map(node, (), lines)
    _no_nul(data, lines, source)
    try:
        return LoadedSpec(SweepSpec.model_validate(data), source, lines)
    except ValidationError as exc:
        raise _first_error(exc, data, lines, source) from None
    except RecursionError:  # the bounds above should make this unreachable; never a traceback
        raise SpecError(f"{source}:1: nested too deeply to validate; a spec is flat") from None


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file."""
    return load_spec_lines(path).spec


def load_spec_lines(path: str | Path) -> LoadedSpec:
    """load_spec, keeping the line of every field."""
    p = Path(path)
    text = read_user_text(p, max_bytes=MAX_SPEC_BYTES, example="a spec such as layouts/qwen72b.yaml")
    loaded = parse_spec_lines(text, str(p))
    return replace(loaded, spec=_relative_to(loaded.spec, p.parent))


def _relative_to(spec: SweepSpec, spec_dir: Path) -> SweepSpec:
    """A calibration profile named by a relative path is relative to the spec file, not the shell."""
    cal = spec.hardware.calibration
    if cal is None or not (cal.endswith((".yaml", ".yml")) or "/" in cal) or Path(cal).is_absolute():
        return spec
    hardware = spec.hardware.model_copy(update={"calibration": str(spec_dir / cal)})
    return spec.model_copy(update={"hardware": hardware})


def spec_from_json(data: Any, source: str) -> SweepSpec:
    """A spec stored as JSON (in a run of the results store), validated again: a store written by an
    older orch, or altered, gives one line instead of a traceback."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise SpecError(
            f"{source}: the stored spec no longer validates ({where}: {err['msg']}); "
            "rerun from the spec file with `orch sweep SPEC`"
        ) from None


def revalidated(spec: SweepSpec, flags: str) -> SweepSpec:
    """A spec changed in code (command-line overrides; model_copy skips validation), validated again
    with the file's rules: `--rates nan` is refused like `rates_per_s: [.nan]`."""
    data = spec.model_dump(mode="json")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        err = max(exc.errors(), key=lambda e: len(_data_path(e["loc"], data)))
        path = _data_path(tuple(err["loc"]), data)
        raise SpecError(f"{flags}: {_dotted(path)}: {_message(err, path, data)}") from None


def with_workload(spec: SweepSpec, *, rates: list[float] | None, num_requests: int | None) -> SweepSpec:
    """The spec with --rates and --num-requests folded in (a request count replaces the duration)."""
    update: dict[str, Any] = {}
    if rates:
        update["rates_per_s"] = list(rates)
    if num_requests is not None:
        update.update(num_requests=num_requests, duration_s=None)
    if not update:
        return spec
    changed = spec.model_copy(update={"workload": spec.workload.model_copy(update=update)})
    return revalidated(changed, "--rates/--num-requests")


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec, for editors and CI validation."""
    return SweepSpec.model_json_schema()


def spec_hash(spec: SweepSpec) -> str:
    """sha256 of the canonical JSON form: equal specs hash equal whatever their YAML formatting."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
