"""Fixtures for gateway tests: a scripted fake API server and a gateway that never waits."""

from __future__ import annotations

from typing import Iterator

import pytest
from gw_fakeapi import FakeApi
from gw_helpers import FakeClock, SleepRecorder, lease_obj, make_gateway, node_obj

from rollout.gateway import KubeGateway


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi()
    yield api
    api.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def gw(fake: FakeApi, clock: FakeClock, sleeps: SleepRecorder) -> Iterator[KubeGateway]:
    gateway = make_gateway(fake.url, clock=clock, sleeps=sleeps)
    yield gateway
    gateway.close()


@pytest.fixture
def three_nodes(fake: FakeApi) -> list[str]:
    names = ["node-a", "node-b", "node-c"]
    for n in names:
        fake.put("nodes", node_obj(n))
        fake.put("leases", lease_obj(n), ns="kube-node-lease")
    return names
