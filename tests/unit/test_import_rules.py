"""Two house rules about imports, read from the source: no test edits sys.path (helpers import as
`tests.support.<module>`, with pyproject's pytest `pythonpath`), and no orch module imports another
module's private (`_x`) names (each package exports what others use)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import ROOT

# Adding to sys.path by hand, in any spelling (also inside a child's `python -c` script).
SYS_PATH_EDIT = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\s*\(|\[[^\]]*\]\s*=|\+=|=[^=])")

# Private names imported across orch modules, as (importer, source, name): none (issue 24 removed the
# last); nothing may be added.
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports() -> set[tuple[str, str, str]]:
    """(importer, source module, name) for every `from <orch module> import _name` in another module,
    relative imports resolved; at module level or inside a function alike."""
    found = set()
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != "orchestrator" or source == me:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add((me, source, alias.name))
    return found


def test_no_test_file_edits_sys_path() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SYS_PATH_EDIT.search(line)
    ]
    assert offenders == [], "import test helpers as tests.support.<module> instead:\n" + "\n".join(offenders)


def test_the_sys_path_pattern_catches_every_spelling() -> None:
    # Built by joining, so this file does not hold the spellings it looks for.
    caught = [".insert(0, d)", ".append(d)", ".extend([d])", "[:0] = [d]", "[0:0]=[d]", " += [d]", " = [d]"]
    for tail in caught:
        assert SYS_PATH_EDIT.search("sys.path" + tail), tail
    for tail in [" == []", "[0]", ")", "_hooks"]:  # reads are fine (a child's PYTHONPATH built from it)
        assert not SYS_PATH_EDIT.search("x = [*sys.path" + tail), tail


def test_no_orch_module_imports_another_modules_private_names() -> None:
    found = private_imports()
    new = sorted(found - KNOWN_PRIVATE_IMPORTS)
    assert new == [], f"private names imported across modules (export a public name instead): {new}"
    gone = sorted(KNOWN_PRIVATE_IMPORTS - found)
    assert gone == [], f"fixed: take these out of KNOWN_PRIVATE_IMPORTS: {gone}"
