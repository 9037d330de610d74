"""What the numbers were measured on: a figure without its machine is not a result."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def redis_version(client: Any) -> str:
    try:
        return str(client.info("server").get("redis_version", "?"))
    except Exception:  # noqa: BLE001 - a description must not fail the run
        return "unknown"


def describe(redis_client: Any | None = None) -> dict[str, Any]:
    """CPU model, cores, OS, Python, Locust and Redis versions, and the exact command."""
    try:
        from importlib.metadata import version
        locust_version = version("locust")
    except Exception:  # noqa: BLE001
        locust_version = "unknown"
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "locust": locust_version,
        "redis": redis_version(redis_client) if redis_client is not None else "unknown",
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
