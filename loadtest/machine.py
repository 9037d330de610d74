"""What the numbers were measured on: a figure without its machine is not a result."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from webapp.config import without_password

#: what a recorded command line never shows; argparse also takes any unique prefix
#: (``--admin``), so those are hidden as well
SECRET_OPTION = "--admin-token"
HIDDEN = "***"


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


def _secret_option(arg: str) -> bool:
    return len(arg) > 2 and SECRET_OPTION.startswith(arg)


def shareable(argv: list[str]) -> list[str]:
    """``argv`` fit for a report that is meant to be shared: the value of
    ``--admin-token X`` and ``--admin-token=X`` becomes ``***``, and so does the password
    of any URL (``--url http://user:pw@host``, ``REDIS_URL=redis://:pw@host``).

    The command was recorded as typed, so ``index.html``, ``summary.json`` and ``--json``
    carried the shop's admin token in plain text (a showdown audit)."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(HIDDEN)
            hide_next = False
            continue
        name, eq, value = arg.partition("=")
        if _secret_option(name):
            if eq:
                shown.append(f"{name}={HIDDEN}")
            else:
                shown.append(arg)
                hide_next = True
        elif eq and "://" in value and "://" not in name:
            shown.append(f"{name}={without_password(value)}")
        elif "://" in arg:
            shown.append(without_password(arg))
        else:
            shown.append(arg)
    return shown


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
        "command": shlex.join(shareable([Path(sys.argv[0]).name, *sys.argv[1:]])),
    }
