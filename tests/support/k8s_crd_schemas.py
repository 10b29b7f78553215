"""JSON Schemas of the LeaderWorkerSet and RayService fields orch emits.

kubernetes-validate knows only built-in kinds and merely warns on CRDs, so these schemas pin down the CRD
fields we write (names, types, required parts, no unknown keys at the levels we own). The pod templates
inside are checked separately against the real PodTemplate schema with kubernetes-validate --strict.
Written from the LWS and KubeRay API references, not copied from their CRDs.
"""

from __future__ import annotations

from typing import Any

_NAME = {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_META = {
    "type": "object",
    "required": ["name", "namespace", "labels"],
    "properties": {
        "name": _NAME,
        "namespace": _NAME,
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
_POD_TEMPLATE = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
        "spec": {"type": "object", "required": ["containers"]},
    },
    "additionalProperties": False,
}

LEADER_WORKER_SET: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"},
        "kind": {"const": "LeaderWorkerSet"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["replicas", "leaderWorkerTemplate"],
            "additionalProperties": False,
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "leaderWorkerTemplate": {
                    "type": "object",
                    "required": ["size", "workerTemplate"],
                    "additionalProperties": False,
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "restartPolicy": {"enum": ["RecreateGroupOnPodRestart", "None"]},
                        "leaderTemplate": _POD_TEMPLATE,
                        "workerTemplate": _POD_TEMPLATE,
                    },
                },
            },
        },
    },
}

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

RAY_SERVICE: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayService"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["serveConfigV2", "rayClusterConfig"],
            "additionalProperties": False,
            "properties": {
                "serveConfigV2": {"type": "string", "minLength": 1},
                "rayClusterConfig": {
                    "type": "object",
                    "required": ["headGroupSpec"],
                    "additionalProperties": False,
                    "properties": {
                        "rayVersion": {"type": "string"},
                        "headGroupSpec": {
                            "type": "object",
                            "required": ["template"],
                            "additionalProperties": False,
                            "properties": {"rayStartParams": _STR_MAP, "template": _POD_TEMPLATE},
                        },
                        "workerGroupSpecs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["groupName", "template"],
                                "additionalProperties": False,
                                "properties": {
                                    "groupName": {"type": "string", "minLength": 1},
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "minReplicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 0},
                                    "rayStartParams": _STR_MAP,
                                    "template": _POD_TEMPLATE,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

# The Ray Serve config inside serveConfigV2 (a YAML string), for the fields of one LLM application.
SERVE_CONFIG: dict[str, Any] = {
    "type": "object",
    "required": ["applications"],
    "properties": {
        "applications": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "import_path", "args"],
                "properties": {
                    "name": {"type": "string"},
                    "route_prefix": {"type": "string", "pattern": "^/"},
                    "import_path": {"const": "ray.serve.llm:build_openai_app"},
                    "args": {
                        "type": "object",
                        "required": ["llm_configs"],
                        "properties": {
                            "llm_configs": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["model_loading_config", "engine_kwargs"],
                                    "properties": {
                                        "model_loading_config": {
                                            "type": "object",
                                            "required": ["model_id", "model_source"],
                                        },
                                        "engine_kwargs": {
                                            "type": "object",
                                            "required": ["tensor_parallel_size", "pipeline_parallel_size"],
                                            "properties": {
                                                "tensor_parallel_size": {"type": "integer", "minimum": 1},
                                                "pipeline_parallel_size": {"type": "integer", "minimum": 1},
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                },
            },
        }
    },
}
