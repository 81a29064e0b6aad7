"""Server-side printing (``meta.k8s.io/v1`` Tables) for ``kubectl get``.

Column sets and cell rules follow the 1.23 printers in ``pkg/printers/internalversion`` so that
``kubectl get nodes`` shows ``NAME STATUS ROLES AGE VERSION`` (and the wide columns with ``-o
wide``). Rows carry ``PartialObjectMetadata`` by default, the full object with
``includeObject=Object`` and nothing with ``includeObject=None``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable

from . import timefmt

TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"

Row = list[Any]
# column descriptions as the real printers publish them (kubectl shows them nowhere; kept for fidelity)
_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "http://kubernetes.io/docs/user-guide/identifiers#names"
)
_AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_ADDRESS_DESC = (
    "List of addresses reachable to the node. Queried from cloud provider, if available. More info: "
    "https://kubernetes.io/docs/concepts/nodes/node/#addresses Note: This field is declared as mergeable, but "
    "the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers "
    "should instead use a full-replacement patch. See http://pr.k8s.io/79391 for an example."
)


def _col(
    name: str, description: str = "", *, fmt: str = "", priority: int = 0, type_: str = "string"
) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


def _age(obj: dict[str, Any], now: datetime) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    return _since(created, now)


def _since(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return "<unknown>"
    moment = timefmt.parse(stamp)
    if moment is None:
        return "<unknown>"
    return timefmt.human_duration((now - moment).total_seconds())


# --- nodes -------------------------------------------------------------------------------------

NODE_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Status", "The status of the node"),
    _col("Roles", "The roles of the node"),
    _col("Age", _AGE_DESC),
    _col("Version", "Kubelet Version reported by the node."),
    _col(
        "Internal-IP",
        _ADDRESS_DESC,
        priority=1,
    ),
    _col(
        "External-IP",
        _ADDRESS_DESC,
        priority=1,
    ),
    _col(
        "OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", priority=1
    ),
    _col(
        "Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", priority=1
    ),
    _col(
        "Container-Runtime",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        priority=1,
    ),
]


def node_status(obj: dict[str, Any]) -> str:
    status = []
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            status.append("Ready" if cond.get("status") == "True" else "NotReady")
            break
    if not status:
        status.append("Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def node_roles(obj: dict[str, Any]) -> str:
    roles = set()
    for key, value in ((obj.get("metadata") or {}).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            role = key[len("node-role.kubernetes.io/") :]
            if role:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) if roles else "<none>"


def _address(obj: dict[str, Any], kind: str) -> str:
    addresses: list[dict[str, str]] = (obj.get("status") or {}).get("addresses") or []
    for address in addresses:
        if address.get("type") == kind:
            return address.get("address", "<none>")
    return "<none>"


def _node_row(obj: dict[str, Any], now: datetime) -> Row:
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    return [
        obj["metadata"]["name"],
        node_status(obj),
        node_roles(obj),
        _age(obj, now),
        info.get("kubeletVersion", ""),
        _address(obj, "InternalIP"),
        _address(obj, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# --- other kinds -------------------------------------------------------------------------------

CONFIGMAP_COLUMNS = [_col("Name", _NAME_DESC, fmt="name"), _col("Data", "", type_="string"), _col("Age", _AGE_DESC)]
NAMESPACE_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Status", "The status of the namespace"),
    _col("Age", _AGE_DESC),
]
LEASE_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Holder", "holderIdentity contains the identity of the holder of a current lease."),
    _col("Age", _AGE_DESC),
]
POD_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        type_="string",
    ),
    _col("Age", _AGE_DESC),
    _col("IP", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
         priority=1),
    _col("Node", "NodeName is a request to schedule this pod onto a specific node.", priority=1),
    _col("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node.", priority=1),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.", priority=1),
]
PDB_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Min Available", "The minimum number of pods that must be available simultaneously. This can be either "
         "an integer or a string specifying a percentage, e.g. \"28%\"."),
    _col("Max Unavailable", "The maximum number of pods that may be unavailable simultaneously. This can be either "
         "an integer or a string specifying a percentage, e.g. \"28%\"."),
    _col("Allowed Disruptions", "Calculated number of pods that may be disrupted at this time.", type_="integer"),
    _col("Age", _AGE_DESC),
]
# printReplicaSet / printDaemonSet (the wide columns: containers, images, selector)
_WIDE_WORKLOAD = [
    _col("Containers", "Names of each container in the template.", priority=1),
    _col("Images", "Images referenced by each container in the template.", priority=1),
    _col("Selector", "Label selector for pods. Existing pods selected by this will be the ones affected by this "
         "replica set.", priority=1),
]
REPLICA_SET_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Desired", "Replicas is the number of desired replicas.", type_="integer"),
    _col("Current", "Replicas is the most recently oberved number of replicas.", type_="integer"),
    _col("Ready", "The number of ready replicas for this replica set.", type_="integer"),
    _col("Age", _AGE_DESC),
    *_WIDE_WORKLOAD,
]
DAEMON_SET_COLUMNS = [
    _col("Name", _NAME_DESC, fmt="name"),
    _col("Desired", "The total number of nodes that should be running the daemon pod.", type_="integer"),
    _col("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the "
         "daemon pod.", type_="integer"),
    _col("Ready", "The number of nodes that should be running the daemon pod and have one or more of the daemon "
         "pod running and ready.", type_="integer"),
    _col("Up-to-date", "The total number of nodes that are running updated daemon pod", type_="integer"),
    _col("Available", "The number of nodes that should be running the daemon pod and have one or more of the "
         "daemon pod running and available (ready for at least spec.minReadySeconds)", type_="integer"),
    _col("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node."),
    _col("Age", _AGE_DESC),
    *_WIDE_WORKLOAD,
]
EVENT_COLUMNS = [
    _col("Last Seen", "Time when this Event was last observed."),
    _col("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    _col(
        "Reason",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    _col("Object", "The object that this event is about."),
    _col("Subobject", "The subobject of the object that this event is about.", priority=1),
    _col("Source", "The component reporting this event. Should be a short machine understandable string.", priority=1),
    _col("Message", "A human-readable description of the status of this operation."),
    _col(
        "First Seen",
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
        priority=1,
    ),
    _col("Count", "The number of times this event has occurred.", priority=1, type_="integer"),
    _col("Name", _NAME_DESC, fmt="name", priority=1),
]


def _configmap_row(obj: dict[str, Any], now: datetime) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [obj["metadata"]["name"], count, _age(obj, now)]


def _namespace_row(obj: dict[str, Any], now: datetime) -> Row:
    return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase", ""), _age(obj, now)]


def _lease_row(obj: dict[str, Any], now: datetime) -> Row:
    holder = (obj.get("spec") or {}).get("holderIdentity") or "<unset>"
    return [obj["metadata"]["name"], holder, _age(obj, now)]


def _pod_row(obj: dict[str, Any], now: datetime) -> Row:
    """``printPod`` without init containers: READY counts ready container statuses."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase", "")
    if obj["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
    true_conditions = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        _age(obj, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{sum(1 for g in gates if g in true_conditions)}/{len(gates)}" if gates else "<none>",
    ]


def _pdb_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        str(spec["minAvailable"]) if spec.get("minAvailable") is not None else "N/A",
        str(spec["maxUnavailable"]) if spec.get("maxUnavailable") is not None else "N/A",
        status.get("disruptionsAllowed", 0),
        _age(obj, now),
    ]


def _wide_workload(spec: dict[str, Any]) -> Row:
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    return [
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


def _replica_set_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    counts = [spec.get("replicas", 1), status.get("replicas", 0), status.get("readyReplicas", 0)]
    return [obj["metadata"]["name"], *counts, _age(obj, now), *_wide_workload(spec)]


def _daemon_set_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    keys = ("desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled",
            "numberAvailable")
    node_selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>"
    return [obj["metadata"]["name"], *(status.get(k, 0) for k in keys), selector, _age(obj, now),
            *_wide_workload(spec)]


def _event_row(obj: dict[str, Any], now: datetime) -> Row:
    first = _since(obj.get("firstTimestamp"), now) if obj.get("firstTimestamp") else _since(obj.get("eventTime"), now)
    last = _since(obj.get("lastTimestamp"), now) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 1
    series = obj.get("series")
    if series:
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count", count)
    involved = obj.get("involvedObject") or {}
    source = obj.get("source") or {}
    source_text = source.get("component", "")
    if source.get("host"):
        source_text += ", " + source["host"]
    return [
        last,
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source_text,
        (obj.get("message") or "").strip(),
        first,
        count,
        obj["metadata"]["name"],
    ]


PRINTERS: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any], datetime], Row]]] = {
    "nodes": (NODE_COLUMNS, _node_row),
    "configmaps": (CONFIGMAP_COLUMNS, _configmap_row),
    "namespaces": (NAMESPACE_COLUMNS, _namespace_row),
    "leases": (LEASE_COLUMNS, _lease_row),
    "pods": (POD_COLUMNS, _pod_row),
    "poddisruptionbudgets": (PDB_COLUMNS, _pdb_row),
    "events": (EVENT_COLUMNS, _event_row),
    "replicasets": (REPLICA_SET_COLUMNS, _replica_set_row),
    "daemonsets": (DAEMON_SET_COLUMNS, _daemon_set_row),
}


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(
    resource: str,
    objects: Iterable[dict[str, Any]],
    rv: int | str,
    include: str = "Metadata",
    list_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Table of ``objects``; ``list_meta`` (a page's metadata, with ``continue``) overrides ``rv``."""
    columns, printer = PRINTERS[resource]
    now = timefmt.now()
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        row_obj = _row_object(obj, include)
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {"resourceVersion": str(rv)},
        "columnDefinitions": columns,
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """True when the Accept header asks for a meta.k8s.io Table (kubectl get)."""
    for media in accept.split(","):
        params = {p.strip() for p in media.split(";")[1:]}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
    return False
