"""The objects of k8s/ (orch's nightly job and its cluster prerequisites), read for the tests."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.paths import ROOT

K8S = ROOT / "k8s"


def docs() -> dict[str, list[dict[str, Any]]]:
    """Every manifest file of k8s/ but the kustomization, by name: its objects."""
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(K8S.glob("*.yaml"))
        if p.name != "kustomization.yaml"
    }


def objects() -> list[dict[str, Any]]:
    return [d for found in docs().values() for d in found]


def one(kind: str) -> dict[str, Any]:
    """The one object of this kind in k8s/."""
    (obj,) = [o for o in objects() if o["kind"] == kind]
    return obj


def role_grants() -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> the verbs the Role in k8s/ grants on it."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in one("Role")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out
