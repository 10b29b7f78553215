"""A `bench/` script imported as a module, for the tests of bench/ (the scripts are files, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.paths import ROOT


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as module NAME, registered in sys.modules (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
