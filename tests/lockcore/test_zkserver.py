"""ZooKeeperServer: a real standalone ZooKeeper we start, serve from, and stop by pid."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockcore import zkserver
from lockcore.zkserver import ZooKeeperServer, ZooKeeperUnavailable, four_letter_word
from tests.support import missing_system_part, pid_alive

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def server() -> ZooKeeperServer:
    try:
        zkserver.classpath()
    except ZooKeeperUnavailable as exc:
        missing_system_part(str(exc))
    return ZooKeeperServer()


def test_started_server_answers_ruok_and_serves_kazoo_clients(server: ZooKeeperServer) -> None:
    from kazoo.client import KazooClient

    with server:
        assert four_letter_word(server.port, "ruok") == "imok"
        assert server.hosts == f"127.0.0.1:{server.port}"
        client = KazooClient(hosts=server.hosts, timeout=5)
        client.start(timeout=10)
        try:
            client.create("/seckill-zkserver-test", b"x")
            assert client.get("/seckill-zkserver-test")[0] == b"x"
        finally:
            client.stop()
            client.close()


def test_stop_kills_the_process_by_pid_and_removes_its_data(server: ZooKeeperServer) -> None:
    server.start()
    pid, workdir = server.pid, server.workdir
    assert pid is not None and workdir is not None and workdir.exists()
    server.stop()
    assert not pid_alive(pid)
    assert not Path(workdir).exists()
    assert four_letter_word(server.port, "ruok") == ""
    server.stop()  # stopping twice is harmless


def test_kill_then_start_keeps_the_data(server: ZooKeeperServer) -> None:
    from kazoo.client import KazooClient

    with server:
        client = KazooClient(hosts=server.hosts, timeout=5)
        client.start(timeout=10)
        client.create("/kept", b"1")
        client.stop()
        client.close()
        server.kill()
        server.start()
        client = KazooClient(hosts=server.hosts, timeout=5)
        client.start(timeout=10)
        try:
            assert client.exists("/kept")
        finally:
            client.stop()
            client.close()


def test_missing_jars_raise_zookeeper_unavailable(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(zkserver, "JAR_DIR", tmp_path)
    with pytest.raises(ZooKeeperUnavailable, match="zookeeper.jar"):
        ZooKeeperServer().start()


@pytest.mark.parametrize(("java", "jar", "said"), [
    (True, False, "ZooKeeper needs {jar}: it is not there (java is on PATH;"),
    (False, True, "ZooKeeper needs java on PATH: there is none ({jar} is here;"),
    (False, False, "ZooKeeper needs java on PATH and {jar}: neither is here"),
], ids=["no-jar", "no-java", "neither"])
def test_what_is_missing_for_zookeeper_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                java: bool, jar: bool, said: str) -> None:
    # "needs java on PATH and /usr/share/java/zookeeper.jar" whichever was missing, with
    # ZOOKEEPER_JARS=/empty and with no java alike (a labs audit)
    monkeypatch.setattr(zkserver, "JAR_DIR", tmp_path)
    if jar:
        (tmp_path / "zookeeper.jar").write_bytes(b"")
    monkeypatch.setattr(zkserver.shutil, "which",
                        lambda name: f"/usr/bin/{name}" if java else None)
    with pytest.raises(zkserver.ZooKeeperMissing) as raised:
        zkserver.classpath()
    assert str(raised.value).startswith(said.format(jar=tmp_path / "zookeeper.jar")), \
        str(raised.value)
