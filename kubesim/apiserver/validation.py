"""Object validation as ``pkg/apis/core/validation`` does it for the kinds kubesim serves.

The node config-source rules (edge case E13) are copied function for function from the 1.23
validation: ``uid``/``resourceVersion`` are forbidden in ``spec.configSource`` and required in
``status.config``, exactly one reference subfield must be set, and the create path does not look
at the config source at all (only ``ValidateNodeUpdate`` does).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import FieldError, GoRepr
from .selectors import label_selector_matches

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
    "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
IMMUTABLE_CM_MSG = "field is immutable when `immutable` is set"


def dns1123_label(value: str) -> list[str]:
    msgs = []
    if len(value) > 63:
        msgs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        msgs.append(LABEL_MSG)
    return msgs


def dns1123_subdomain(value: str) -> list[str]:
    msgs = []
    if len(value) > 253:
        msgs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        msgs.append(SUBDOMAIN_MSG)
    return msgs


def config_map_key(value: str) -> list[str]:
    msgs = []
    if len(value) > 253:
        msgs.append("must be no more than 253 characters")
    if not _CONFIG_KEY.match(value):
        msgs.append(CONFIG_KEY_MSG)
    if value == ".":
        msgs.append("must not be '.'")
    elif value == "..":
        msgs.append("must not be '..'")
    elif value.startswith(".."):
        msgs.append("must not start with '..'")
    return msgs


# --- object metadata ---------------------------------------------------------------------------

def path_segment_name(value: str) -> list[str]:
    """``path.IsValidPathSegmentName``: RBAC names such as ``system:node`` need only be a URL segment."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


_RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
_NAME_RULES = {"Namespace": dns1123_label, **{kind: path_segment_name for kind in _RBAC_KINDS}}


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MAX_ANNOTATIONS_BYTES = 256 * 1024


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: label and annotation keys (``[prefix/]name``)."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a qualified name {_QUALIFIED_RULE} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    msgs = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            msgs.append("prefix part must be non-empty")
        else:
            msgs += [f"prefix part {m}" for m in dns1123_subdomain(prefix)]
    if not name:
        msgs.append("name part must be non-empty")
    elif len(name) > 63:
        msgs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME.match(name):
        msgs.append(f"name part {_QUALIFIED_RULE}")
    return msgs


def label_value(value: str) -> list[str]:
    msgs = []
    if len(value) > 63:
        msgs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        msgs.append(LABEL_VALUE_MSG)
    return msgs


def _labels_and_annotations(meta: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for field, value in (("labels", labels), ("annotations", annotations)):
        if not isinstance(value, dict):
            errs.append(FieldError("Invalid", f"metadata.{field}", "must be a map of strings", GoRepr("...")))
    if errs:
        return errs
    for key, value in labels.items():
        errs += [FieldError("Invalid", "metadata.labels", m, key) for m in qualified_name(key)]
        errs += [FieldError("Invalid", "metadata.labels", m, value) for m in label_value(str(value))]
    for key in annotations:
        errs += [FieldError("Invalid", "metadata.annotations", m, key) for m in qualified_name(key.lower())]
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        errs.append(FieldError("TooLong", "metadata.annotations", f"must have at most {MAX_ANNOTATIONS_BYTES} bytes"))
    return errs


def validate_metadata(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    """``ValidateObjectMeta``: name rules of the kind, label and annotation keys/values/size."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    errs: list[FieldError] = []
    if not name:
        errs.append(FieldError("Required", "metadata.name", "name or generateName is required"))
    else:
        for msg in _NAME_RULES.get(kind, dns1123_subdomain)(name):
            errs.append(FieldError("Invalid", "metadata.name", msg, name))
    return errs + _labels_and_annotations(meta)


# --- nodes (E13) -------------------------------------------------------------------------------


def _config_map_source(cm: dict[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    namespace, name, key = cm.get("namespace") or "", cm.get("name") or "", cm.get("kubeletConfigKey") or ""
    if not namespace:
        errs.append(FieldError("Required", f"{path}.namespace", "namespace must be set"))
    else:
        errs += [FieldError("Invalid", f"{path}.namespace", m, namespace) for m in dns1123_label(namespace)]
    if not name:
        errs.append(FieldError("Required", f"{path}.name", "name must be set"))
    else:
        errs += [FieldError("Invalid", f"{path}.name", m, name) for m in dns1123_subdomain(name)]
    if not key:
        errs.append(FieldError("Required", f"{path}.kubeletConfigKey", "kubeletConfigKey must be set"))
    else:
        errs += [FieldError("Invalid", f"{path}.kubeletConfigKey", m, key) for m in config_map_key(key)]
    return errs


def _go_source(source: dict[str, Any]) -> GoRepr:
    """``%#v`` of a ``core.NodeConfigSource`` whose ConfigMap is nil (the only invalid shape)."""
    return GoRepr("core.NodeConfigSource{ConfigMap:(*core.ConfigMapNodeConfigSource)(nil)}")


def _node_config_source(source: Any, path: str, in_status: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    cm = source.get("configMap") if isinstance(source, dict) else None
    if cm is not None:
        cm_path = f"{path}.configMap"
        if in_status:
            if not cm.get("uid"):
                errs.append(FieldError("Required", f"{cm_path}.uid", "uid must be set in status"))
            if not cm.get("resourceVersion"):
                errs.append(
                    FieldError("Required", f"{cm_path}.resourceVersion", "resourceVersion must be set in status")
                )
        else:
            if cm.get("uid"):
                errs.append(FieldError("Forbidden", f"{cm_path}.uid", "uid must not be set in spec"))
            if cm.get("resourceVersion"):
                errs.append(
                    FieldError("Forbidden", f"{cm_path}.resourceVersion", "resourceVersion must not be set in spec")
                )
        errs += _config_map_source(cm, cm_path)
    else:
        errs.append(
            FieldError("Invalid", path, "exactly one reference subfield must be non-nil", _go_source(source or {}))
        )
    return errs


def validate_node(obj: dict[str, Any]) -> list[FieldError]:
    """``ValidateNode``: metadata and basic spec shape; no config-source checks (create path)."""
    return validate_metadata("Node", obj) + validate_node_taints(obj)


def validate_node_taints(obj: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
        effect = taint.get("effect") or ""
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(
                FieldError(
                    "NotSupported",
                    f"spec.taints[{i}].effect",
                    'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                    effect,
                )
            )
    return errs


def validate_node_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``ValidateNodeUpdate``: metadata, then the E13 rules for ``spec.configSource`` and ``status.config``."""
    errs: list[FieldError] = _labels_and_annotations(new.get("metadata") or {})
    source = (new.get("spec") or {}).get("configSource")
    if source is not None:
        errs += _node_config_source(source, "spec.configSource", in_status=False)
    config = (new.get("status") or {}).get("config")
    if config is not None:
        for part in ("assigned", "active", "lastKnownGood"):
            if config.get(part) is not None:
                errs += _node_config_source(config[part], f"status.config.{part}", in_status=True)
    old_cidr = (old.get("spec") or {}).get("podCIDR") or ""
    new_cidr = (new.get("spec") or {}).get("podCIDR") or ""
    if old_cidr and new_cidr != old_cidr:
        errs.append(
            FieldError("Forbidden", "spec.podCIDR", 'node updates may not change podCIDR except from "" to valid')
        )
    return errs


# --- configmaps --------------------------------------------------------------------------------


def validate_config_map(obj: dict[str, Any]) -> list[FieldError]:
    errs = validate_metadata("ConfigMap", obj)
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    for key in data:
        errs += [FieldError("Invalid", "data", m, key) for m in config_map_key(key)]
    for key in binary:
        errs += [FieldError("Invalid", "binaryData", m, key) for m in config_map_key(key)]
        if key in data:
            errs.append(FieldError("Invalid", "binaryData", "duplicate of key present in data", key))
    # the API server counts bytes (Go's len of a string), not characters
    size = sum(len(k.encode()) + len((v or "").encode()) for k, v in data.items()) + sum(
        len(k.encode()) + len(v or "") * 3 // 4 for k, v in binary.items()
    )
    if size > 1024 * 1024:
        errs.append(FieldError("TooLong", "[]", "must have at most 1048576 bytes"))
    return errs


def validate_config_map_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if old.get("immutable"):
        if not new.get("immutable"):
            errs.append(FieldError("Forbidden", "immutable", IMMUTABLE_CM_MSG))
        if (new.get("data") or {}) != (old.get("data") or {}):
            errs.append(FieldError("Forbidden", "data", IMMUTABLE_CM_MSG))
        if (new.get("binaryData") or {}) != (old.get("binaryData") or {}):
            errs.append(FieldError("Forbidden", "binaryData", IMMUTABLE_CM_MSG))
    return errs + validate_config_map(new)


# --- leases, events, namespaces ----------------------------------------------------------------


def validate_lease(obj: dict[str, Any]) -> list[FieldError]:
    errs = validate_metadata("Lease", obj)
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        errs.append(FieldError("Invalid", "spec.leaseDurationSeconds", "must be greater than 0", duration))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        errs.append(FieldError("Invalid", "spec.leaseTransitions", "must be greater than or equal to 0", transitions))
    return errs


def validate_event(obj: dict[str, Any]) -> list[FieldError]:
    errs = validate_metadata("Event", obj)
    involved = obj.get("involvedObject") or {}
    event_ns = (obj.get("metadata") or {}).get("namespace") or ""
    involved_ns = involved.get("namespace") or ""
    if involved_ns and involved_ns != event_ns:
        errs.append(FieldError("Invalid", "involvedObject.namespace", "does not match event.namespace", involved_ns))
    return errs


def validate_namespace(obj: dict[str, Any]) -> list[FieldError]:
    return validate_metadata("Namespace", obj)


# --- pods --------------------------------------------------------------------------------------

RESTART_POLICIES = ("Always", "OnFailure", "Never")
# the first line of ValidatePodUpdate's refusal (the real one appends a diff of the specs)
POD_UPDATE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, "
    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or "
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def validate_pod(obj: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodCreate`` for what kubesim reads: containers (name, image) and restartPolicy."""
    errs = validate_metadata("Pod", obj)
    spec = obj.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        errs.append(FieldError("Required", "spec.containers", ""))
    seen: set[str] = set()
    for i, container in enumerate(containers):
        path = f"spec.containers[{i}]"
        name = (container or {}).get("name") or ""
        if not name:
            errs.append(FieldError("Required", f"{path}.name", ""))
        else:
            errs += [FieldError("Invalid", f"{path}.name", m, name) for m in dns1123_label(name)]
            if name in seen:
                errs.append(FieldError("Duplicate", f"{path}.name", "", name))
            seen.add(name)
        if not (container or {}).get("image"):
            errs.append(FieldError("Required", f"{path}.image", ""))
    policy = spec.get("restartPolicy", "Always")
    if policy not in RESTART_POLICIES:
        supported = ", ".join(f'"{p}"' for p in RESTART_POLICIES)
        errs.append(FieldError("NotSupported", "spec.restartPolicy", f"supported values: {supported}", policy))
    return errs


def validate_pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodUpdate``: a pod's spec is immutable but for its images and activeDeadlineSeconds."""
    errs = _labels_and_annotations(new.get("metadata") or {})
    new_spec, old_spec = dict(new.get("spec") or {}), dict(old.get("spec") or {})
    new_containers = new_spec.get("containers") or []
    old_containers = old_spec.get("containers") or []
    if len(new_containers) == len(old_containers):  # let the image be the one change allowed
        old_spec["containers"] = [
            {**old_c, "image": new_c.get("image")} for old_c, new_c in zip(old_containers, new_containers)
        ]
    for mutable in ("activeDeadlineSeconds",):
        old_spec.pop(mutable, None)
        new_spec.pop(mutable, None)
    if new_spec != old_spec:
        errs.append(FieldError("Forbidden", "spec", POD_UPDATE_MSG))
    return errs


# --- poddisruptionbudgets ----------------------------------------------------------------------

PERCENT_MSG = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
    "regex used for validation is '[0-9]+%')"
)
_PERCENT = re.compile(r"^[0-9]+%$")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _int_or_string_repr(value: Any) -> GoRepr:
    if isinstance(value, int):
        return GoRepr(f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}')
    return GoRepr(f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{value}"}}')


def _positive_int_or_percent(value: Any, path: str) -> list[FieldError]:
    """``ValidatePositiveIntOrPercent`` plus ``IsNotMoreThan100Percent``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [FieldError("Invalid", path, "must be an integer or percentage (e.g '5%')", GoRepr(repr(value)))]
    if isinstance(value, int):
        return [] if value >= 0 else [FieldError("Invalid", path, "must be greater than or equal to 0", value)]
    if not _PERCENT.match(value):
        return [FieldError("Invalid", path, PERCENT_MSG, _int_or_string_repr(value))]
    if int(value[:-1]) > 100:
        return [FieldError("Invalid", path, "must not be greater than 100%", _int_or_string_repr(value))]
    return []


def validate_label_selector(selector: Any, path: str) -> list[FieldError]:
    """``ValidateLabelSelector``: operators, their values, and label keys/values."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [FieldError("Invalid", path, "must be a label selector", GoRepr(repr(selector)))]
    errs: list[FieldError] = []
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        operator, values = expression.get("operator", ""), expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            errs.append(FieldError("Required", f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist") and values:
            errs.append(
                FieldError(
                    "Forbidden", f"{where}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                )
            )
        elif operator not in _SELECTOR_OPERATORS:
            errs.append(FieldError("Invalid", f"{where}.operator", "not a valid selector operator", operator))
        key = expression.get("key", "")
        errs += [FieldError("Invalid", f"{where}.key", m, key) for m in qualified_name(key)]
    for key, value in (selector.get("matchLabels") or {}).items():
        errs += [FieldError("Invalid", f"{path}.matchLabels", m, key) for m in qualified_name(key)]
        errs += [FieldError("Invalid", f"{path}.matchLabels", m, value) for m in label_value(str(value))]
    return errs


def validate_pod_disruption_budget(obj: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodDisruptionBudget`` (policy/v1): the two budgets exclude each other."""
    errs = validate_metadata("PodDisruptionBudget", obj)
    spec = obj.get("spec") or {}
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        errs.append(
            FieldError(
                "Invalid", "spec", "minAvailable and maxUnavailable cannot be both set",
                GoRepr("policy.PodDisruptionBudgetSpec{...}"),
            )
        )
    if min_available is not None:
        errs += _positive_int_or_percent(min_available, "spec.minAvailable")
    if max_unavailable is not None:
        errs += _positive_int_or_percent(max_unavailable, "spec.maxUnavailable")
    return errs + validate_label_selector(spec.get("selector"), "spec.selector")


# --- replicasets, daemonsets -------------------------------------------------------------------

SELECTOR_MISMATCH_MSG = "`selector` does not match template `labels`"


def validate_workload(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    """``ValidateReplicaSet`` / ``ValidateDaemonSet`` for what kubesim reads: a non-empty selector
    that the template's labels match, a template with containers, replicas not negative."""
    errs = validate_metadata(kind, obj)
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    errs += validate_label_selector(selector, "spec.selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errs.append(FieldError("Invalid", "spec.selector", "empty selector is invalid for deployment",
                               GoRepr("map[string]string(nil)")))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector and not label_selector_matches(selector, labels):
        errs.append(FieldError("Invalid", "spec.template.metadata.labels", SELECTOR_MISMATCH_MSG,
                               GoRepr(f"map[string]string{labels}")))
    if not ((template.get("spec") or {}).get("containers")):
        errs.append(FieldError("Required", "spec.template.spec.containers", ""))
    replicas = spec.get("replicas", 1)
    if kind == "ReplicaSet" and (not isinstance(replicas, int) or replicas < 0):
        errs.append(FieldError("Invalid", "spec.replicas", "must be greater than or equal to 0", replicas))
    return errs
