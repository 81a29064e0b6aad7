"""Which cluster a run reaches, and whether it is the one it was meant for.

A fleet names each cluster's identity (``clusters[].identity`` in the fleet file) and a worker
holds the credentials of one cluster: a worker started with another cluster's kubeconfig (one
wrong environment variable) would roll that cluster out under this one's name. So a run given an
expected identity checks the cluster it reaches before its first write (the lock included) and
is refused, naming both identities, when any part differs.

The parts, each optional but at least one given (the more, the safer):

* ``server``: the API server URL the credentials point at (in a pod: the ``kubernetes`` service,
  the same in every cluster, so give the CA's fingerprint or the UID there);
* ``caSha256``: the SHA-256 fingerprint of the CA certificate the connection trusts (the first
  one of the kubeconfig's ``certificate-authority(-data)``), as ``openssl x509 -fingerprint
  -sha256`` prints it or as plain hex;
* ``kubeSystemUID``: the UID of the ``kube-system`` namespace, made once when the cluster was
  created and never reused (the cluster's own identity, behind any load balancer or DNS name).

``rollout fleet identify`` prints what a kubeconfig reaches, to paste into the fleet file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Mapping

from rollout.errors import FlagError, WrongClusterError

# the fleet file's and the flow parameter's keys, in the order people read them
KEYS = {"server": "server", "ca_sha256": "caSha256", "kube_system_uid": "kubeSystemUID"}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def fingerprint(text: str) -> str:
    """A SHA-256 fingerprint as lower-case hex: ``AB:CD:...`` (openssl), ``sha256:abcd...``, plain."""
    value = text.strip().lower().removeprefix("sha256:").removeprefix("sha256 fingerprint=").replace(":", "")
    if not _HEX64.match(value):
        raise ValueError(f"a SHA-256 fingerprint is 64 hex digits (colons allowed), got {text!r}")
    return value


def server_url(text: str) -> str:
    """An API server URL as compared: no trailing slash."""
    value = text.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"an API server URL starts with https:// (or http://), got {text!r}")
    return value


@dataclass(frozen=True)
class ClusterIdentity:
    """What identifies a cluster; None: not given (expected) or not known (reached)."""

    server: str | None = None
    ca_sha256: str | None = None
    kube_system_uid: str | None = None

    @classmethod
    def expected(cls, server: str | None = None, ca_sha256: str | None = None,
                 kube_system_uid: str | None = None) -> ClusterIdentity:
        """An identity a cluster must have, its parts normalized (``ValueError`` naming a bad one)."""
        identity = cls(server=server_url(server) if server else None,
                       ca_sha256=fingerprint(ca_sha256) if ca_sha256 else None,
                       kube_system_uid=kube_system_uid.strip() if kube_system_uid else None)
        if not identity.given():
            raise ValueError("an identity names at least one of server, caSha256, kubeSystemUID "
                             "(`rollout fleet identify --kubeconfig FILE` prints all three)")
        return identity

    @classmethod
    def from_params(cls, params: Mapping[str, object] | None) -> ClusterIdentity | None:
        """The identity a flow parameter (or a fleet file's block) gives, checked; None for none."""
        if not params:
            return None
        unknown = sorted(set(params) - set(KEYS.values()))
        if unknown:
            raise FlagError(f"unknown identity key(s) {', '.join(unknown)} (known: {', '.join(KEYS.values())})",
                            source="cluster_identity")
        try:
            return cls.expected(**{attr: str(params[key]) for attr, key in KEYS.items() if params.get(key)})
        except ValueError as exc:
            raise FlagError(str(exc), source="cluster_identity") from None

    def given(self) -> dict[str, str]:
        """The parts given, by their fleet-file keys."""
        return {KEYS[f.name]: value for f in fields(self) if (value := getattr(self, f.name))}

    def describe(self) -> str:
        return ", ".join(f"{key} {value}" for key, value in self.given().items()) or "nothing known"

    def differences(self, reached: ClusterIdentity) -> list[str]:
        """Each part this (expected) identity gives that ``reached`` does not have."""
        return [KEYS[f.name] for f in fields(self)
                if getattr(self, f.name) is not None and getattr(self, f.name) != getattr(reached, f.name)]


def check_cluster(expected: ClusterIdentity | None, reached: ClusterIdentity, *, named: str = "") -> None:
    """Refuse to go on when the cluster reached is not the one expected (nothing expected: any)."""
    if expected is None:
        return
    differ = expected.differences(reached)
    if differ:
        meant = f"cluster {named!r}" if named else "the expected cluster"
        raise WrongClusterError(
            f"these credentials reach another cluster than {meant} ({', '.join(differ)} differ{'s' if len(differ) == 1 else ''}): "
            f"expected {expected.describe()}; reached {reached.describe()}. Nothing was written",
            expected=expected.given(), reached=reached.given())


__all__ = ["KEYS", "ClusterIdentity", "check_cluster", "fingerprint", "server_url"]
