"""Which fields each kind has: unknown fields are dropped, as a 1.23 API server drops them.

kube-apiserver decodes request bodies into Go structs, so a field the type does not have (a typo
like ``spec.configsource``, or a field from a newer API) silently disappears - 1.23's
``fieldValidation=Strict`` is alpha and off. A simulator that stored such fields would let a
client read back something a real cluster never keeps. Maps (labels, data, capacity, ...) are
leaves: their keys are data, not fields.
"""

from __future__ import annotations

from typing import Any, Union


class ListOf:
    """A list whose items are structs of ``schema``."""

    def __init__(self, schema: "Schema"):
        self.schema = schema


Schema = Union[dict[str, Any], ListOf, None]  # None: a leaf (scalar, map, or list of scalars)


def struct(*leaves: str, **nested: Schema) -> dict[str, Schema]:
    return {**{name: None for name in leaves}, **nested}


_OWNER_REFERENCE = struct("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
_MANAGED_FIELDS = struct("manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource")
OBJECT_META = struct(
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
    "clusterName",
    ownerReferences=ListOf(_OWNER_REFERENCE),
    managedFields=ListOf(_MANAGED_FIELDS),
)
_OBJECT_REFERENCE = struct("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_CONFIG_SOURCE = struct(
    configMap=struct("namespace", "name", "uid", "resourceVersion", "kubeletConfigKey"),
)
_CONDITION = struct("type", "status", "lastHeartbeatTime", "lastTransitionTime", "reason", "message")

NODE = struct(
    spec=struct(
        "podCIDR",
        "podCIDRs",
        "providerID",
        "unschedulable",
        "externalID",
        taints=ListOf(struct("key", "value", "effect", "timeAdded")),
        configSource=_CONFIG_SOURCE,
    ),
    status=struct(
        "capacity",
        "allocatable",
        "phase",
        "volumesInUse",
        conditions=ListOf(_CONDITION),
        addresses=ListOf(struct("type", "address")),
        daemonEndpoints=struct(kubeletEndpoint=struct("Port")),
        nodeInfo=struct(
            "machineID",
            "systemUUID",
            "bootID",
            "kernelVersion",
            "osImage",
            "containerRuntimeVersion",
            "kubeletVersion",
            "kubeProxyVersion",
            "operatingSystem",
            "architecture",
        ),
        images=ListOf(struct("names", "sizeBytes")),
        volumesAttached=ListOf(struct("name", "devicePath")),
        config=struct("error", assigned=_CONFIG_SOURCE, active=_CONFIG_SOURCE, lastKnownGood=_CONFIG_SOURCE),
    ),
)
CONFIG_MAP = struct("data", "binaryData", "immutable")
NAMESPACE = struct(
    spec=struct("finalizers"),
    status=struct("phase", conditions=ListOf(struct("type", "status", "lastTransitionTime", "reason", "message"))),
)
LEASE = struct(
    spec=struct("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"),
)
EVENT = struct(
    "reason",
    "message",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "action",
    "reportingComponent",
    "reportingInstance",
    involvedObject=_OBJECT_REFERENCE,
    source=struct("component", "host"),
    series=struct("count", "lastObservedTime"),
    related=_OBJECT_REFERENCE,
)
# a pod's spec and status are kept as sent (not pruned field by field): kubesim reads only the
# few fields its rules need (nodeName, containers, phase, conditions)
POD = struct("spec", "status")
_CONDITION_V1 = struct("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
POD_DISRUPTION_BUDGET = struct(
    spec=struct("minAvailable", "maxUnavailable", "selector"),
    status=struct(
        "observedGeneration",
        "disruptedPods",
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
        conditions=ListOf(_CONDITION_V1),
    ),
)
# like a pod's, a workload's spec (its pod template) and status are kept as sent
WORKLOAD = struct("spec", "status")
SERVICE_ACCOUNT = struct(
    "automountServiceAccountToken",
    secrets=ListOf(_OBJECT_REFERENCE),
    imagePullSecrets=ListOf(struct("name")),
)
_POLICY_RULE = struct("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")
ROLE = struct(rules=ListOf(_POLICY_RULE))
CLUSTER_ROLE = struct(rules=ListOf(_POLICY_RULE), aggregationRule=struct("clusterRoleSelectors"))
BINDING = struct(
    subjects=ListOf(struct("kind", "apiGroup", "name", "namespace")), roleRef=struct("apiGroup", "kind", "name")
)

KINDS: dict[str, dict[str, Schema]] = {
    "Node": NODE,
    "ConfigMap": CONFIG_MAP,
    "Namespace": NAMESPACE,
    "Lease": LEASE,
    "Event": EVENT,
    "Pod": POD,
    "PodDisruptionBudget": POD_DISRUPTION_BUDGET,
    "ReplicaSet": WORKLOAD,
    "DaemonSet": WORKLOAD,
    "ServiceAccount": SERVICE_ACCOUNT,
    "Role": ROLE,
    "ClusterRole": CLUSTER_ROLE,
    "RoleBinding": BINDING,
    "ClusterRoleBinding": BINDING,
}


def prune(kind: str, obj: dict[str, Any]) -> None:
    """Drop, in place, every field of ``obj`` the kind's Go type does not have."""
    schema = {**struct("apiVersion", "kind"), "metadata": OBJECT_META, **KINDS[kind]}
    _prune(obj, schema)


def _prune(value: Any, schema: Schema) -> None:
    if schema is None:
        return
    if isinstance(schema, ListOf):
        if isinstance(value, list):
            for item in value:
                _prune(item, schema.schema)
        return
    if not isinstance(value, dict):
        return
    for key in [k for k in value if k not in schema]:
        del value[key]
    for key, sub in schema.items():
        if key in value:
            _prune(value[key], sub)


# Fields declared ``omitempty`` on non-pointer Go types: their zero value ("" / false / 0 / {} / [])
# is not stored, so sending it is the same as not sending it (``unschedulable: false`` is a no-op).
_META_ZERO = (
    "metadata",
    (
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "generation",
        "deletionGracePeriodSeconds",
    ),
)
OMIT_ZERO: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "Node": (
        _META_ZERO,
        ("spec", ("podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "externalID")),
        (
            "status",
            (
                "capacity",
                "allocatable",
                "phase",
                "conditions",
                "addresses",
                "images",
                "volumesInUse",
                "volumesAttached",
            ),
        ),
    ),
    "ConfigMap": (_META_ZERO, ("", ("data", "binaryData"))),
    "Namespace": (_META_ZERO, ("spec", ("finalizers",)), ("status", ("phase", "conditions"))),
    "Lease": (_META_ZERO,),
    "Event": (_META_ZERO,),
    "Pod": (_META_ZERO,),
    "PodDisruptionBudget": (_META_ZERO, ("status", ("observedGeneration", "disruptedPods", "conditions"))),
    "ReplicaSet": (_META_ZERO,),
    "DaemonSet": (_META_ZERO,),
    "ServiceAccount": (_META_ZERO, ("", ("secrets", "imagePullSecrets"))),
    "Role": (_META_ZERO,),
    "ClusterRole": (_META_ZERO,),
    "RoleBinding": (_META_ZERO, ("", ("subjects",))),
    "ClusterRoleBinding": (_META_ZERO, ("", ("subjects",))),
}


def drop_zero_values(kind: str, obj: dict[str, Any]) -> None:
    """Drop, in place, omitempty fields holding their zero value."""
    for parent, fields in OMIT_ZERO[kind]:
        holder = obj if not parent else obj.get(parent)
        if not isinstance(holder, dict):
            continue
        for field in fields:
            if field in holder and holder[field] in ("", False, 0, {}, []) and holder[field] is not None:
                del holder[field]
