"""Package faces: what each subpackage exports to the others, loaded on first use.

A package's `__init__` names its public face (`lazy_face`) and repeats the imports under
TYPE_CHECKING for the type checker. The submodule is imported only when one of its names is first
read, so importing one small module of a package does not import the whole package (the CLI stays
fast to start, and no package face can close an import circle). tests/unit/test_faces.py checks
that every name another package imports from a package's submodules is on its face.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_face(package: str, face: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any], list[str]]:
    """(`__getattr__`, `__all__`) for `package` from {submodule: names it exports}."""
    where = {name: module for module, names in face.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__, sorted(where)


__all__ = ["lazy_face"]
