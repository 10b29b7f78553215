"""Each package's face (its __init__'s __all__) holds every name another package imports from one of
its submodules, and every name on a face resolves to the submodule's object."""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict

from tests.support.paths import ROOT

PACKAGES = sorted(p.parent.name for p in (ROOT / "orchestrator").glob("*/__init__.py"))


def _module(path_parts: tuple[str, ...]) -> str:
    parts = list(path_parts)
    parts[-1] = parts[-1].removesuffix(".py")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cross_package_imports() -> dict[str, set[str]]:
    """package -> names other packages import from its submodules."""
    used: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        me = _module(path.relative_to(ROOT).parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "orchestrator" or len(parts) < 3 or parts[1] not in PACKAGES:
                continue
            if me.split(".")[:2] == parts[:2]:
                continue  # inside its own package
            used[parts[1]].update(a.name for a in node.names)
    return used


def test_every_name_other_packages_import_is_on_the_face() -> None:
    missing = {
        pkg: sorted(names - set(importlib.import_module(f"orchestrator.{pkg}").__all__))
        for pkg, names in cross_package_imports().items()
    }
    assert {k: v for k, v in missing.items() if v} == {}


def test_every_name_on_a_face_resolves() -> None:
    for pkg in PACKAGES:
        face = importlib.import_module(f"orchestrator.{pkg}")
        for name in getattr(face, "__all__", ()):  # cli has no face: nothing imports it
            assert getattr(face, name) is not None, f"orchestrator.{pkg}.{name}"


def test_no_name_on_a_face_is_also_a_submodule() -> None:
    # Importing the submodule sets the package attribute of that name to the module, which would then
    # hide the name on the face.
    for pkg in PACKAGES:
        face = importlib.import_module(f"orchestrator.{pkg}")
        modules = {p.stem for p in (ROOT / "orchestrator" / pkg).glob("*.py")}
        assert not set(getattr(face, "__all__", ())) & modules, pkg
