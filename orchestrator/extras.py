"""The optional extras of pyproject.toml, what needs each, and the one install hint for them.

The default install (`pip install -e '.[dev]'`, the README's) leaves these out; a command that needs
one says so in one line naming the extra, instead of a ModuleNotFoundError traceback halfway through.
"""

from __future__ import annotations

import importlib.util

from orchestrator.errors import SpecError

# extra -> (the modules it provides that orch imports, what they are for); pyproject.toml lists the
# packages.
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "k8s": (("kubernetes",), "the Kubernetes client"),
    "ray": (("ray",), "Ray"),
    "data": (("pandas", "pyarrow"), "pandas and pyarrow"),
}
TARGET_EXTRAS = {"kubernetes": "k8s", "ray": "ray"}  # target.kind -> the extra it deploys through


class MissingExtra(SpecError):
    """This install lacks an optional extra that the command or the spec asks for."""


def install_hint(extra: str) -> str:
    """The install command for an extra, the same everywhere orch prints one."""
    return f"pip install 'orch[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def missing_modules(extra: str) -> list[str]:
    modules, _ = EXTRAS[extra]
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(extra: str, who: str) -> None:
    """Raise MissingExtra naming `who` (what needs it) and the extra unless its modules import."""
    missing = missing_modules(extra)
    if missing:
        _, what = EXTRAS[extra]
        raise MissingExtra(f"{who} needs {what} ({', '.join(missing)} is not installed): "
                           f"{install_hint(extra)}")


def require_for_target(kind: str, who: str | None = None) -> None:
    """The extra a deploy target needs (kubernetes: [k8s], ray: [ray]); nothing for local."""
    extra = TARGET_EXTRAS.get(kind)
    if extra is not None:
        require(extra, who or f"target.kind {kind!r}")
