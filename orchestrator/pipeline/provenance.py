"""What a run records about where it ran: hardware seen, versions, hashes, run ids."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import shutil
import subprocess
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from orchestrator.catalog.types import ModelConfig


def orch_version() -> str:
    try:
        return version("orch")
    except PackageNotFoundError:
        return "0+unknown"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def model_config_hash(cfg: ModelConfig) -> str:
    return hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:16]


def hardware_seen() -> dict[str, Any]:
    """The machine the sweep ran on: GPUs from nvidia-smi where present, else the CPU model."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        info["cpu_model"] = platform.processor() or "unknown"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
            info["gpus"] = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            info["gpus"] = []
    else:
        info["gpus"] = []
    return info
