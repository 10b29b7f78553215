"""Checks on spec values that end up in argv, environments, scripts, manifests and the store.

Each check raises ValueError (pydantic turns it into the `file:line: field: message` line); the same
functions guard the compile stage, where values can also come from the command line.
"""

from __future__ import annotations

import datetime
import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.spec.engine import SecretRef

# Upper bounds: far above any real sweep, low enough that arithmetic and memory stay sane.
MAX_TOKENS = 10_000_000  # no model's context is longer; 1e9 tokens would be 4 GB of prompt per request
MAX_DURATION_S = 7 * 86_400.0  # a week per load point or per wait
MAX_COUNT = 10_000_000  # requests per point, sequences, concurrency
MAX_RATE_PER_S = 1_000_000.0
MAX_NODES = 10_000

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 253 characters at most.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
# Kubernetes Secret names are DNS subdomains; keys are letters, digits, '-', '_' and '.'.
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")

# Words that make a variable name or a flag look like it carries a credential. Whole words only, so
# TOKENIZERS_PARALLELISM and --max-num-batched-tokens stay allowed.
_SECRET_WORDS = frozenset(
    {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY"}
)
# Values that are credentials whatever their name: HF, OpenAI-style, GitHub, AWS access key ids.
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})"
)
SECRET_FIX = "use engine.env_from_secret (the value stays in your environment or a Kubernetes Secret)"


def looks_secret(name: str) -> bool:
    """HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD, --api-key: a name that says it holds a credential."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name.upper()) if w]
    return any(w in _SECRET_WORDS for w in words)


def check_env_name(name: str, where: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise ValueError(
            f"{where} {name!r} is not a variable name; use letters, digits and '_', not starting with a digit"
        )


def check_env(env: Mapping[str, str]) -> None:
    """engine.env: identifier names, and no credential given as a literal value."""
    for name, value in env.items():
        check_env_name(name, "env name")
        if looks_secret(name) or _SECRET_VALUE.search(value):
            raise ValueError(
                f"{name} looks like a credential and would be stored and written in clear; {SECRET_FIX}, "
                f"e.g. env_from_secret: {{{name}: {{env: {name}}}}}"
            )


def check_extra_args_secrets(args: Sequence[str]) -> None:
    """A credential on the command line (vLLM's --api-key, --hf-token) would be stored with the argv."""
    for token in args:
        flag = token.split("=", 1)[0]
        if (flag.startswith("-") and looks_secret(flag)) or _SECRET_VALUE.search(token):
            raise ValueError(
                f"extra_args {flag}: a credential in argv is stored and shown in clear; {SECRET_FIX} "
                "with the engine's variable for it (vLLM: VLLM_API_KEY, HF_TOKEN)"
            )


def check_secret_refs(refs: Mapping[str, SecretRef], env: Mapping[str, str]) -> None:
    for name, ref in refs.items():
        check_env_name(name, "env_from_secret name")
        if name in env:
            raise ValueError(f"env_from_secret.{name}: also set in engine.env; keep one")
        if ref.env is not None:
            check_env_name(ref.env, f"env_from_secret.{name}.env:")
        if ref.secret is not None and not (len(ref.secret) <= 253 and _SECRET_NAME.fullmatch(ref.secret)):
            raise ValueError(
                f"env_from_secret.{name}.secret {ref.secret!r}: a Secret name is lowercase letters, digits, "
                "'-' and '.', e.g. hf-token"
            )
        if ref.key is not None and not (len(ref.key) <= 253 and _SECRET_KEY.fullmatch(ref.key)):
            raise ValueError(
                f"env_from_secret.{name}.key {ref.key!r}: a Secret key is letters, digits, '-', '_' and '.'"
            )


def check_runtime_env(runtime_env: Mapping[str, Any]) -> None:
    """Ray runtime_env.env_vars: the same rules as engine.env (it reaches the same processes)."""
    env_vars = runtime_env.get("env_vars", {})
    if not isinstance(env_vars, Mapping) or not all(isinstance(v, str) for v in env_vars.values()):
        raise ValueError("runtime_env.env_vars must map variable names to strings")
    check_env(env_vars)


def is_host(text: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    return 0 < len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in text.split("."))


def check_host(text: str) -> None:
    if not is_host(text):
        raise ValueError(f"{text!r} is not a host name or IP address (e.g. 127.0.0.1, gpu-node-1)")


def json_metadata(value: Any, where: str = "") -> Any:
    """Eval metadata as JSON values. YAML dates and timestamps become ISO 8601 strings (they are the
    common case and have one obvious text form); binary, sets, non-finite numbers and non-string keys
    are refused with the fix."""
    at = f"{where}: " if where else ""
    if isinstance(value, str) and _SECRET_VALUE.search(value):
        raise ValueError(f"{at}looks like a credential; metadata is stored and shown in reports: remove it")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{at}{value} is not a finite number; quote it if it is a label")
        return value
    if isinstance(value, datetime.date):  # datetime.datetime is a date too
        return value.isoformat()
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{at}key {key!r} is not a string; quote it")
            out[key] = json_metadata(item, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, list | tuple):
        return [json_metadata(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, bytes | bytearray):
        raise ValueError(f"{at}binary data is not JSON; write it as a string (e.g. base64 text)")
    kind = "a set" if isinstance(value, set | frozenset) else f"a {type(value).__name__}"
    raise ValueError(f"{at}{kind} is not JSON; write a list, a mapping, a string or a number")
