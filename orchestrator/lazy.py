"""A module imported on its first attribute access: numpy costs about 0.1 CPU s to import, more than
`orch validate` spends on a dense model's whole check, which never touches it (only expert-parallel
statistics do). Used as `np = lazy_module("numpy")` in the else branch of `if TYPE_CHECKING:`, so type
checkers see the real module."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands in for a module until an attribute is read; then every read goes to the real module."""

    def __init__(self, name: str) -> None:
        self.__name = name
        self.__module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self.__module
        if module is None:
            module = self.__module = importlib.import_module(self.__name)
        return getattr(module, attr)


def lazy_module(name: str) -> Any:
    return LazyModule(name)
