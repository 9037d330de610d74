"""Labs 9-12 as tests: ghost node, failover, RedLock restart, partition.

Each lab starts its own servers (ZooKeeper, redis-servers, a network namespace) and
stops them by pid, so the test only runs it quietly and checks that the failure it
teaches really happened in this run, and that the protection it shows really held.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from loadtest.labs import Narrator, Verdict, netns, run_lab
from tests.support import need_network_namespaces, need_setpriv, need_zookeeper


def run_quietly(name: str) -> tuple[Verdict, Narrator]:
    narrator = Narrator(quiet=True)
    return run_lab(name, narrator), narrator


@pytest.mark.zookeeper
def test_ghost_node_deadlocks_the_naive_recipe_but_not_kazoos_lock() -> None:
    need_zookeeper("the ghost-node lab")
    verdict, narrator = run_quietly("ghost-node")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["naive_deadlocked"] is True
    # the narration said "C holds the lock" right after "C acquired=False": B and C now
    # stay queued past A's session, and are seen to get the lock, in turn
    assert verdict.facts["naive_b_after"] is True
    assert verdict.facts["naive_c_after"] is True
    # kazoo's act proves its fault happened: the reply to A's create was really lost,
    # and A holds the node that create made, the only child
    assert verdict.facts["kazoo_fault_injected"] is True
    assert verdict.facts["kazoo_recovered"] is True


class NoFault:
    """A ``LostReply`` whose fault never fires: ``create`` is left alone."""

    def __init__(self, client: object, narrator: Narrator) -> None:
        self.path = None

    def undo(self) -> None:
        pass


@pytest.mark.zookeeper
def test_kazoos_act_claims_no_recovery_when_no_reply_was_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The act's claim needs the lost reply: without it kazoo had nothing to recover
    from (the act returned True whether or not the fault fired; a labs audit)."""
    from loadtest.labs import ghost_node

    need_zookeeper("the ghost-node lab")
    narrator = Narrator(quiet=True)
    with ghost_node.zookeeper_sessions(narrator, 2) as (a, b):
        facts = ghost_node.kazoo_act(narrator, a, b)
        assert facts == {"kazoo_fault_injected": True, "kazoo_recovered": True}, \
            narrator.text()
        monkeypatch.setattr(ghost_node, "LostReply", NoFault)
        facts = ghost_node.kazoo_act(narrator, a, b)
    assert facts == {"kazoo_fault_injected": False, "kazoo_recovered": False}, narrator.text()
    assert "(no reply was lost)" in narrator.text()


@pytest.mark.zookeeper
def test_the_naive_act_raises_when_a_client_never_queues_a_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """It waited for A's node with no bound: an A whose acquire died spun it forever."""
    from loadtest.labs import ghost_node
    from loadtest.labs.naive_zk import NaiveZkLock

    need_zookeeper("the ghost-node lab")
    monkeypatch.setattr(NaiveZkLock, "acquire", lambda self, timeout, **kw: False)
    narrator = Narrator(quiet=True)
    outcome: list[BaseException | None] = []

    def act(a: object, b: object, c: object) -> None:
        try:
            ghost_node.naive_act(narrator, a, b, c)  # type: ignore[arg-type]
            outcome.append(None)
        except BaseException as exc:  # the test asserts which
            outcome.append(exc)

    with ghost_node.zookeeper_sessions(narrator, 3) as clients:
        worker = threading.Thread(target=act, args=clients, daemon=True)
        worker.start()
        worker.join(ghost_node.QUEUE_WAIT_S + 5)
    assert not worker.is_alive(), "naive_act still waits for a node nobody will create"
    assert isinstance(outcome[0], RuntimeError), outcome
    assert "A's acquire ended without queueing a node" in str(outcome[0])


def test_failover_before_replication_grants_the_lock_twice_and_wait_refuses_it() -> None:
    verdict, narrator = run_quietly("failover")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["two_holders"] is True
    # the promoted replica lost the fencing counter too: both holders carry token 1
    assert verdict.facts["a_fence"] == verdict.facts["b_fence"] == 1
    assert verdict.facts["wait_refused_unreplicated"] is True
    assert verdict.facts["wait_protected"] is True


def test_redlock_node_restarting_empty_gives_a_second_client_a_majority() -> None:
    verdict, narrator = run_quietly("redlock-restart")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["b_got_after_immediate_restart"] is True
    assert verdict.facts["a_validity_left_ms"] > 0  # A's lease was still good by its own rule
    assert verdict.facts["a_fence"] == verdict.facts["b_fence"]  # the counters were lost too
    assert verdict.facts["b_refused_during_delay"] is True
    assert verdict.facts["b_got_after_ttl"] is True
    assert verdict.facts["a_validity_left_at_b_ms"] <= 0  # the delay outlasted A's lease


def test_redlock_restart_is_not_demonstrated_when_node_3_rejoins_at_once(monkeypatch) -> None:
    # the delay removed, B got the lock while A's lease was still good, and the verdict
    # still said the delay had prevented it: nothing checked A's lease then (a mutation
    # check)
    import time

    from loadtest.labs import redlock_restart

    monkeypatch.setattr(redlock_restart, "time", SimpleNamespace(
        monotonic=time.monotonic, sleep=lambda seconds: None))
    verdict, narrator = run_quietly("redlock-restart")
    assert not verdict.demonstrated, narrator.text()
    assert verdict.facts["a_validity_left_at_b_ms"] > 0
    assert "while A's lease still has" in narrator.text()


@pytest.mark.netns
def test_partitioned_holder_still_believes_while_the_majority_side_grants_the_lock() -> None:
    need_network_namespaces("the partition lab")
    verdict, narrator = run_quietly("partition")
    assert verdict.demonstrated, narrator.text()
    facts = verdict.facts
    # before the cut A's renewals kept all five keys past the ttl: B was refused
    assert facts["a_renewed_past_ttl"] is True
    assert facts["a_nodes_before_cut"] == ["mine"] * 5
    assert facts["b_before_cut"] is False
    # after it B holds exactly the majority side, A exactly its island
    assert facts["b_after_cut"] is True
    assert facts["b_nodes"] == ["mine"] * 3 + ["unreachable"] * 2
    assert facts["a_nodes"] == ["unreachable"] * 3 + ["mine"] * 2
    assert facts["a_renewals_failed_after_cut"] >= 1
    assert facts["a_believes"] is True
    assert facts["a_told_lost"] is True
    assert facts["a_validity_left_ms"] <= 0


@pytest.mark.netns
def test_partition_lab_without_the_cut_demonstrates_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict must rest on the partition: with a cable that never goes dark, A's
    renewals keep its keys on every node and B stays refused (an audit replaced
    ``cut`` by a no-op and still read DEMONSTRATED, when A's keys simply expired)."""
    need_network_namespaces("the partition lab")
    monkeypatch.setattr(netns.Island, "cut", lambda self: None)
    verdict, narrator = run_quietly("partition")
    assert verdict.demonstrated is False, narrator.text()
    assert verdict.facts["b_after_cut"] is False
    assert verdict.facts["a_nodes"] == ["mine"] * 5


@pytest.mark.netns
def test_partition_lab_keeps_its_verdict_when_bs_release_finds_its_keys_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine B's keys may expire before its release: LockNotOwned there
    turned a demonstrated run into a lab error."""
    from lockcore.errors import LockNotOwned
    from lockcore.strategies.redlock import RedLock

    need_network_namespaces("the partition lab")

    def expired(self: RedLock, token: str) -> None:
        raise LockNotOwned("released on only 0 of 5 nodes: (the test's)", self.name)

    monkeypatch.setattr(RedLock, "_release", expired)
    verdict, narrator = run_quietly("partition")
    assert verdict.demonstrated, narrator.text()
    assert "B's release" in narrator.text()


def test_partition_lab_says_skipped_and_why_where_it_cannot_build_namespaces(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "shutil", SimpleNamespace(which=lambda name: "/usr/sbin/ip"))
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    verdict, narrator = run_quietly("partition")
    assert verdict.demonstrated is False
    assert verdict.line == "SKIPPED: creating network namespaces needs root"
    assert verdict.facts["skipped"] == "creating network namespaces needs root"


def test_partition_lab_says_skipped_as_root_without_cap_net_admin() -> None:
    """Root without CAP_NET_ADMIN (a container's default) may add a namespace but no
    veth: the lab ended in a traceback and "lab error" (a labs audit), not SKIPPED."""
    import subprocess
    import sys

    need_network_namespaces("the partition lab, then again without CAP_NET_ADMIN")
    need_setpriv("a process without CAP_NET_ADMIN")
    lab = subprocess.run(
        ["setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin", "--",
         sys.executable, "-c", "from webapp.cli import main; "
         "raise SystemExit(main(['scenario', 'partition']))"],
        capture_output=True, text=True, timeout=120)
    assert lab.returncode == 1, (lab.stdout, lab.stderr)
    assert "VERDICT: NOT DEMONSTRATED: SKIPPED: ip link add (a veth cable) refused: " \
        in lab.stdout, lab.stdout
    assert "Traceback" not in lab.stderr, lab.stderr
