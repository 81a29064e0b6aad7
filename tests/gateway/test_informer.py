"""NodeInformer's watch protocol against a scripted API server: list then watch from the list's RV,
bookmarks, resume without replays, 410 relists (HTTP and event), reconnects, retries, refusals,
prompt stop, monotonic versions and when it counts as live, silent streams (dead or only quiet);
and against kubesim, changes that straddle dropped streams.

Faults are scripted after ``wait_synced``: from then on only the node watch makes requests (the
Lease watch sits on its open stream), so each scripted answer reaches the node watch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from gw_fakeapi import FakeApi
from gw_helpers import SleepRecorder, lease_obj, make_gateway, node_obj

from rollout.errors import ForbiddenError
from rollout.gateway import KubeGateway, NodeInformer, default_retrying


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def node_watches(fake: FakeApi) -> list[dict[str, str]]:
    """The query of every node watch request, in order."""
    return [{k: v[-1] for k, v in parse_qs(query).items()}
            for _, path, query in list(fake.state.audit)
            if path == "/api/v1/nodes" and "watch=" in query]


def lease_lists(fake: FakeApi) -> int:
    """Lease list requests so far (not watches)."""
    return sum(1 for _, path, query in list(fake.state.audit)
               if path.endswith("/leases") and "watch=" not in query)


def end_node_stream(fake: FakeApi, resource: str = "nodes") -> None:
    with fake.state.cond:
        fake.state.end_watches = resource
        fake.state.cond.notify_all()


@pytest.fixture
def informer(gw: KubeGateway, three_nodes: list[str]) -> Iterator[NodeInformer]:
    inf = gw.informer()
    inf.start()
    assert inf.wait_synced(5)
    yield inf
    inf.stop()


def test_lists_first_then_watches_from_the_lists_rv(gw, fake, three_nodes):
    list_rv = str(fake.state.rv)
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        assert sorted(inf.snapshot()) == three_nodes
        assert inf.get("node-a").lease_duration_s == 40.0
        (first,) = node_watches(fake)
        assert first["resourceVersion"] == list_rv and first["allowWatchBookmarks"] == "true"
        assert inf.relists == 1
    # no per-node requests: one list, one watch
    assert not [a for a in fake.state.audit if a[1].startswith("/api/v1/nodes/")]


def node_lists(fake: FakeApi) -> int:
    """Node list requests so far (not watches)."""
    return sum(1 for _, path, query in list(fake.state.audit) if path == "/api/v1/nodes" and "watch=" not in query)


def test_a_view_seeded_with_a_listing_watches_on_from_it_without_listing_again(gw, fake, three_nodes):
    """Start-up lists the nodes and Leases once: the plan's list seeds the live view."""
    listing = gw.listing()
    assert (node_lists(fake), lease_lists(fake)) == (1, 1)
    changed = fake.put("nodes", node_obj("node-b", ready="False"))["metadata"]["resourceVersion"]
    with gw.informer(seed=listing) as inf:
        assert inf.wait_synced(5)
        assert inf.get("node-a").lease_duration_s == 40.0 and inf.relists == 0
        wait_until(lambda: inf.get("node-b").resource_version == changed, "the change made after the list")
        (first,) = node_watches(fake)
        assert first["resourceVersion"] == listing.resource_version
    assert (node_lists(fake), lease_lists(fake)) == (1, 1)


def test_a_listing_too_old_to_watch_from_is_listed_again(gw, fake, three_nodes):
    listing = gw.listing()
    _delete_unseen(fake, "node-c")
    fake.state.watch_gone_http, fake.state.watch_gone_only = 1, "nodes"  # not the Lease watch, should it ask first
    with gw.informer(seed=listing) as inf:
        wait_until(lambda: inf.relists == 1 and inf.synced, "the relist after 410")
        assert sorted(inf.snapshot()) == ["node-a", "node-b"]


def test_a_listing_seeds_only_a_view_of_the_same_nodes(gw, three_nodes):
    with pytest.raises(ValueError, match="cannot seed"):
        gw.informer("pool=a", seed=gw.listing())


def test_a_bookmark_moves_the_resume_rv_without_an_event(fake, informer):
    before = informer.snapshot()
    fake.put("configmaps", {"metadata": {"name": "unrelated"}}, ns="kube-system")  # bumps the RV
    end_node_stream(fake)  # ends with a BOOKMARK at that RV
    wait_until(lambda: len(node_watches(fake)) == 2 and informer.synced, "the reconnect")
    assert node_watches(fake)[1]["resourceVersion"] == str(fake.state.rv)
    assert informer.snapshot() == before and informer.events == 0 and informer.relists == 1


def test_closed_streams_resume_from_the_last_rv_without_replays(fake, informer, three_nodes):
    fake.state.close_watch_after = 1
    rvs = [fake.put("nodes", node_obj(n, ready="False"))["metadata"]["resourceVersion"]
           for n in three_nodes]
    wait_until(lambda: informer.reconnects == 3 and informer.synced, "three reconnects")
    assert [w["resourceVersion"] for w in node_watches(fake)][1:] == rvs  # each from the last RV
    assert informer.events == 3  # each change once
    assert {n: (o.ready, o.resource_version) for n, o in informer.snapshot().items()} == {
        n: ("False", rv) for n, rv in zip(three_nodes, rvs)}
    assert informer.relists == 1


def _delete_unseen(fake: FakeApi, name: str) -> None:
    """Delete a node with no watch event for it (as if the server's history had moved on)."""
    with fake.state.cond:
        fake.delete("nodes", name)
        fake.state.history.clear()


@pytest.mark.parametrize("gone", ["watch_gone_http", "watch_gone_event"], ids=["HTTP 410", "410 ERROR event"])
def test_410_relists_drops_deleted_nodes_and_keeps_watching(fake, informer, gone):
    _delete_unseen(fake, "node-c")
    setattr(fake.state, gone, 1)
    end_node_stream(fake)
    wait_until(lambda: informer.relists == 2 and informer.synced, "the relist")
    assert sorted(informer.snapshot()) == ["node-a", "node-b"]
    if gone == "watch_gone_http":
        assert len(node_watches(fake)) == 3  # the 410 answer, then a watch from the new list
    fake.put("nodes", node_obj("node-a", ready="False"))
    wait_until(lambda: informer.get("node-a").ready == "False", "the live change")


def test_error_event_mid_stream_reconnects_from_the_same_rv(fake, informer):
    fake.state.watch_error_event = 1
    end_node_stream(fake)
    wait_until(lambda: "ERROR event 500" in informer.last_error, "the ERROR event")
    fake.put("nodes", node_obj("node-c", ready="False"))
    wait_until(lambda: informer.get("node-c").ready == "False", "the change after reconnecting")
    watches = node_watches(fake)
    assert len(watches) == 3 and watches[1]["resourceVersion"] == watches[2]["resourceVersion"]
    assert informer.relists == 1  # an error is not a 410: no relist


def test_an_unreadable_object_is_skipped_and_the_watch_goes_on_past_it(fake, informer, caplog):
    bad = node_obj("node-b", ready="False")
    bad["metadata"]["labels"] = ["not", "a", "map"]  # no API server sends this; a proxy might
    bad_rv = fake.put("nodes", bad)["metadata"]["resourceVersion"]
    fake.put("nodes", node_obj("node-c", ready="False"))
    wait_until(lambda: informer.get("node-c").ready == "False", "the change after the unreadable one")
    assert informer.get("node-b").ready == "True"  # what it held before, not a half-read object
    assert f"skipping an unreadable MODIFIED event (rv {bad_rv})" in caplog.text
    assert len(node_watches(fake)) == 1 and informer.reconnects == 0  # the stream went on
    end_node_stream(fake)
    wait_until(lambda: len(node_watches(fake)) == 2, "the reconnect")
    assert int(node_watches(fake)[1]["resourceVersion"]) > int(bad_rv)  # never replayed


def test_transient_errors_when_connecting_are_retried(gw, fake, sleeps, three_nodes):
    fake.state.failures = [(503, "1"), (429, "1")]
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        assert sorted(inf.snapshot()) == three_nodes
        assert sleeps.calls[:2] == [1.0, 1.0]  # Retry-After honoured by the retry policy
        assert inf.relists == 1 and inf.last_error == ""  # retried within the call


def test_an_outage_is_ridden_out_not_raised(fake, clock, three_nodes):
    gw = make_gateway(fake.url, clock=clock, attempts=2)
    fake.state.failures = [(503, None)] * 8  # two rounds of two attempts per watch
    with gw.informer() as inf:
        assert inf.wait_synced(0.3) is False  # not live, but not an error either
        assert "HTTP 503" in inf.last_error
        assert inf.wait_synced(5)  # the server answers again
        assert sorted(inf.snapshot()) == three_nodes
    gw.close()


def test_stop_ends_promptly_while_blocked_on_idle_streams(informer):
    started = time.monotonic()
    informer.stop()
    assert time.monotonic() - started < 1.0
    assert not any(t.is_alive() for t in informer._threads)


def test_stop_ends_promptly_when_it_races_a_reconnect(fake, clock, three_nodes):
    sleeps = HeldSleep()
    gw = make_gateway(fake.url, clock=clock, sleeps=sleeps)
    inf = gw.informer()
    inf.start()
    assert inf.wait_synced(5)
    fake.state.failures = [(503, "1")]
    end_node_stream(fake)
    wait_until(lambda: sleeps.calls, "the held reconnect")
    stopping = threading.Thread(target=inf.stop)
    started = time.monotonic()
    stopping.start()
    wait_until(inf._stop.is_set, "stop() to begin")
    sleeps.release.set()  # the reconnect now succeeds, after stop() shut the open streams
    stopping.join(5)
    assert time.monotonic() - started < 1.0
    assert not any(t.is_alive() for t in inf._threads)
    gw.close()


def test_a_replayed_older_event_never_replaces_a_newer_version(fake, informer):
    old = fake.put("nodes", node_obj("node-a", ready="False"))["metadata"]["resourceVersion"]
    new = fake.put("nodes", node_obj("node-a", ready="Unknown"))["metadata"]["resourceVersion"]
    wait_until(lambda: informer.events == 2, "both changes")
    fake.state.replay = [int(old)]  # the next stream resends the older one first
    end_node_stream(fake)
    wait_until(lambda: informer.events == 3, "the replayed event")
    held = informer.get("node-a")
    assert (held.ready, held.resource_version) == ("Unknown", new)


def test_an_event_older_than_a_written_response_is_dropped(fake, informer):
    written = replace(informer.get("node-a"), ready="Unknown", resource_version=str(fake.state.rv + 10))
    informer.observe_written(written)
    fake.put("nodes", node_obj("node-a", ready="False"))  # older than the write's response
    wait_until(lambda: informer.events == 1, "the older event")
    held = informer.get("node-a")
    assert (held.ready, held.resource_version) == ("Unknown", written.resource_version)


class HeldSleep(SleepRecorder):
    """Retry sleeps that block until released: holds a reconnect in progress."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, seconds: float) -> None:
        super().__call__(seconds)
        self.release.wait(5)


def test_not_synced_from_a_streams_end_until_the_next_watch_connects(fake, clock, three_nodes):
    sleeps = HeldSleep()
    gw = make_gateway(fake.url, clock=clock, sleeps=sleeps)
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        assert inf.watched_since == clock.now
        fake.state.failures = [(503, "1")]  # the reconnect is retried, held in its sleep
        end_node_stream(fake)
        wait_until(lambda: sleeps.calls, "the held reconnect")
        assert not inf.synced and inf.watched_since is None
        clock.advance(30)
        sleeps.release.set()
        assert inf.wait_synced(5)
        assert inf.watched_since == clock.now  # evidence counts from the reconnection only
    gw.close()


@pytest.mark.parametrize("resource", ["nodes", "leases"])
def test_a_410_in_the_stream_leaves_the_view_not_live_until_the_relist_is_done(fake, clock, three_nodes,
                                                                               resource):
    sleeps = HeldSleep()
    gw = make_gateway(fake.url, clock=clock, sleeps=sleeps)
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        fake.state.watch_gone_event = 1  # the watch that resumes gets a 410 ERROR event
        fake.state.list_failures = [(503, "1")]  # and the relist after it is held in its retry
        end_node_stream(fake, resource)
        wait_until(lambda: sleeps.calls, "the held relist")
        assert not inf.synced and inf.watched_since is None
        sleeps.release.set()
        assert inf.wait_synced(5)
    gw.close()


def _short_leases(fake: FakeApi, names: list[str], duration: int = 2) -> None:
    """Nodes whose Leases last ``duration`` s: the Lease watch may keep quiet for half of it."""
    for n in names:
        fake.put("nodes", node_obj(n))
        fake.put("leases", lease_obj(n, duration=duration), ns="kube-node-lease")


def test_a_lease_watch_that_stops_delivering_is_replaced_with_the_node_watch(fake, clock):
    """Its connection goes silent, not closed, while a kubelet renews: within half a Lease
    duration the renewal is read by a list, and both watches are live again, on new streams; the
    node watch resumed where it was, and the evidence starts afresh."""
    _short_leases(fake, ["node-a", "node-b"])
    gw = make_gateway(fake.url, clock=clock)
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        before = inf.watched_since
        clock.advance(30)
        fake.silence_open_watches("leases")
        renewed = "2026-11-22T10:00:20.000000Z"
        fake.put("leases", lease_obj("node-a", renewed, duration=2), ns="kube-node-lease")
        wait_until(lambda: inf.get("node-a").lease_renewed.isoformat().startswith("2026-11-22T10:00:20"),
                   "the renewal the silent watch never delivered")
        wait_until(lambda: len(node_watches(fake)) == 2 and inf.synced, "both watches live again")
        first, second = node_watches(fake)
        assert second["resourceVersion"] == first["resourceVersion"] and inf.relists == 1
        assert inf.watched_since == clock.now != before
    gw.close()


def test_a_quiet_lease_watch_is_checked_not_distrusted(fake, clock):
    """No kubelet renews (a one-node cluster whose kubelet crash-loops): the Lease watch has
    nothing to deliver. A list finds nothing it missed, so the evidence stays continuous (the
    stale Lease keeps counting) and the node watch is left alone."""
    _short_leases(fake, ["node-a"])
    gw = make_gateway(fake.url, clock=clock)
    with gw.informer() as inf:
        assert inf.wait_synced(5)
        since = inf.watched_since
        clock.advance(30)
        seen: list[object] = []

        def checked() -> bool:
            live_since = inf.watched_since
            if lease_lists(fake) >= 2 and live_since is not None:
                seen.append(live_since)
            return bool(seen)

        wait_until(checked, "the Lease list that checks the quiet watch")
        assert seen == [since]
        assert len(node_watches(fake)) == 1
    gw.close()


def test_a_node_watch_that_stops_delivering_is_resumed_after_its_bound(fake, clock, three_nodes):
    gw = make_gateway(fake.url, clock=clock)
    with NodeInformer(gw, node_silence_s=1.0) as inf:
        assert inf.wait_synced(5)
        fake.silence_open_watches("nodes")
        fake.put("nodes", node_obj("node-b", ready="False"))
        wait_until(lambda: inf.get("node-b").ready == "False", "the change, on the resumed watch")
        first, second = node_watches(fake)
        assert second["resourceVersion"] == first["resourceVersion"] and inf.relists == 1
    gw.close()


def test_a_403_makes_wait_synced_raise_forbidden(gw, fake, three_nodes):
    fake.state.failures = [(403, None)]
    with gw.informer() as inf:
        with pytest.raises(ForbiddenError, match="forbidden"):
            inf.wait_synced(5)
        assert inf.refused is not None and not inf.synced
        with pytest.raises(ForbiddenError):  # final: waiting again does not wait it out
            inf.wait_synced(5)



def test_through_dropped_streams_it_reaches_the_last_change_and_never_goes_back(kubesim_cluster):
    cluster = kubesim_cluster(nodes=2)
    gw, writer_gw = (KubeGateway.from_kubeconfig(
        cluster.kubeconfig, retrying=default_retrying(attempts=8, sleep=lambda _s: None))
        for _ in range(2))
    done = threading.Event()

    def writer() -> None:
        for i in range(6):
            writer_gw.assign("node-1", None, annotations={"gw-test/step": str(i)})
            done.wait(0.4)  # so the changes straddle several dropped streams

    rvs: list[int] = []
    marks: list[str] = []
    with gw.informer() as inf:
        assert inf.wait_synced(10)
        cluster.faults.apply({"api": {"drop_watches": True}})  # every stream dies after 0.5-1.5 s
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        seen = inf.version
        try:
            deadline = time.monotonic() + 20
            while not marks or marks[-1] != "5":
                assert time.monotonic() < deadline, f"saw only steps {marks}"
                seen = inf.wait_for_change(seen, 1.0)
                node = inf.get("node-1")
                rvs.append(int(node.resource_version))
                mark = node.annotations.get("gw-test/step")
                if mark is not None and (not marks or marks[-1] != mark):
                    marks.append(mark)
        finally:
            done.set()
            thread.join(10)
            cluster.faults.apply({"reset": True})
        assert inf.reconnects >= 1 and inf.relists == 1
    assert marks[-1] == "5" and marks == sorted(marks)
    assert rvs == sorted(rvs)  # never back to an older version
    resumed = [parse_qs(urlsplit(e["requestURI"]).query).get("resourceVersion", [""])[0]
               for e in cluster.audit_log.events(verb="watch")
               if e["user"]["username"] == "admin" and e["objectRef"]["resource"] == "nodes"]
    assert len(resumed) >= 2 and [int(rv) for rv in resumed] == sorted(int(rv) for rv in resumed)
    gw.close()
    writer_gw.close()


def test_a_list_while_the_run_goes_on_comes_in_pages_and_misses_nothing(kubesim_cluster, monkeypatch):
    from rollout.gateway import _informer

    monkeypatch.setattr(_informer, "RELIST_PAGE", 2)
    cluster = kubesim_cluster(nodes=5)
    gw = KubeGateway.from_kubeconfig(cluster.kubeconfig, retrying=default_retrying(attempts=8, sleep=lambda _s: None))
    before = len(cluster.audit_log.events())
    with gw.informer() as inf:  # not seeded: it lists nodes and Leases itself
        assert inf.wait_synced(10)
        seen = inf.snapshot()
    assert sorted(seen) == ["control-plane-1"] + [f"node-{i}" for i in range(1, 6)]
    assert all(o.lease_duration_s == 40.0 and o.lease_renewed is not None for o in seen.values())
    lists = [e for e in cluster.audit_log.events()[before:] if e["verb"] == "list"
             and e["user"]["username"] == "admin"]
    pages = {resource: [parse_qs(urlsplit(e["requestURI"]).query) for e in lists
                        if e["objectRef"]["resource"] == resource] for resource in ("nodes", "leases")}
    assert [len(p) for p in pages.values()] == [3, 3]  # 2 + 2 + 2 of each
    assert all(q["limit"] == ["2"] for p in pages.values() for q in p)
