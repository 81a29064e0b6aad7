"""The three patch types kube-apiserver accepts for built-in kinds.

Strategic merge patch needs each kind's Go struct tags (``patchStrategy``/``patchMergeKey``); the
few that matter for nodes, namespaces, configmaps, events and leases are in :data:`SMP_SCHEMA`.
Directives (``$patch``, ``$setElementOrder/``, ``$deleteFromPrimitiveList/``, ``$retainKeys``)
never reach the stored object.
"""

from __future__ import annotations

import copy
from typing import Any

from . import errors

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = {"json": JSON_PATCH, "merge": MERGE_PATCH, "strategic": STRATEGIC_PATCH}
ACCEPTED = f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}"

# (kind, path) -> merge key; "" = merge primitive list as a set. Paths not listed are replaced.
_META: dict[tuple[str, ...], str] = {("metadata", "finalizers"): "", ("metadata", "ownerReferences"): "uid"}
SMP_SCHEMA: dict[str, dict[tuple[str, ...], str]] = {
    "Node": {
        **_META,
        ("spec", "podCIDRs"): "",
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
    "Namespace": {**_META, ("status", "conditions"): "type"},
    "ConfigMap": dict(_META),
    "Event": dict(_META),
    "Lease": dict(_META),
    # PodSpec.containers and PodStatus.conditions: patchStrategy merge (by name, by type)
    "Pod": {**_META, ("spec", "containers"): "name", ("status", "conditions"): "type"},
    # PodDisruptionBudgetStatus.conditions: listType map, key type
    "PodDisruptionBudget": {**_META, ("status", "conditions"): "type"},
    # the pod template's containers merge by name, as a pod's do
    "ReplicaSet": {**_META, ("spec", "template", "spec", "containers"): "name"},
    "DaemonSet": {**_META, ("spec", "template", "spec", "containers"): "name"},
    # ServiceAccount.secrets: patchStrategy merge, patchMergeKey name; RBAC lists are atomic
    "ServiceAccount": {**_META, ("secrets",): "name"},
    "Role": dict(_META),
    "ClusterRole": dict(_META),
    "RoleBinding": dict(_META),
    "ClusterRoleBinding": dict(_META),
}

_DELETE = object()  # sentinel: "$patch: delete" on a map


def apply_patch(kind: str, original: dict[str, Any], patch: Any, content_type: str) -> object:
    """Apply a patch of the given media type to a copy of ``original``.

    The result is an object unless a JSON patch replaced the document's root: callers check.
    """
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        return json_patch(original, patch)
    if not isinstance(patch, dict):
        raise errors.bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
    if content_type == MERGE_PATCH:
        return merge_patch(original, patch)
    if content_type == STRATEGIC_PATCH:
        result = strategic_merge(original, patch, SMP_SCHEMA.get(kind, {}), ())
        return {} if result is _DELETE else result
    raise errors.unsupported_media_type(ACCEPTED)


# --- JSON merge patch (RFC 7386) ---------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ---------------------------------------------------------------------


def strategic_merge(
    original: Any, patch: dict[str, Any], schema: dict[tuple[str, ...], str], path: tuple[str, ...]
) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return _DELETE
    if directive is not None:
        raise errors.bad_request(f"Unknown patch type: {directive}")
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        _merge_key(result, key, value, schema, path + (key,))
    _apply_list_directives(result, patch, schema, path)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_key(
    result: dict[str, Any], key: str, value: Any, schema: dict[tuple[str, ...], str], path: tuple[str, ...]
) -> None:
    if value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        merged = strategic_merge(result.get(key), value, schema, path)
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _merge_list(result.get(key), value, schema.get(path), schema, path)
    else:
        result[key] = value


def _merge_list(
    original: Any, patch: list[Any], merge_key: str | None, schema: dict[tuple[str, ...], str], path: tuple[str, ...]
) -> list[Any]:
    merged: list[Any] = list(original) if isinstance(original, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    if merge_key is None:
        return [_strip(i) if isinstance(i, dict) else i for i in patch]
    if merge_key == "":
        return merged + [v for v in patch if v not in merged]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise errors.bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
        index = next(
            (i for i, o in enumerate(merged) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(_strip(item))
        else:
            merged[index] = strategic_merge(merged[index], item, schema, path)
    return merged


def _apply_list_directives(
    result: dict[str, Any], patch: dict[str, Any], schema: dict[tuple[str, ...], str], path: tuple[str, ...]
) -> None:
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in value]
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = _reorder(result[name], value, schema.get(path + (name,)))


def _reorder(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        if merge_key and isinstance(item, dict):
            return item.get(merge_key)
        return item

    wanted = [ident(o) for o in order]
    ranked = [i for i in items if ident(i) in wanted]
    ranked.sort(key=lambda i: wanted.index(ident(i)))
    return ranked + [i for i in items if ident(i) not in wanted]


def _strip(value: Any) -> Any:
    """Remove SMP directives from a value that replaces (rather than merges into) the original."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


# --- JSON patch (RFC 6902) ---------------------------------------------------------------------


class _PatchFailed(Exception):
    pass


def json_patch(original: dict[str, Any], operations: list[Any]) -> object:
    doc: Any = copy.deepcopy(original)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise errors.bad_request("json patch operation is missing 'op' or 'path'")
        try:
            doc = _json_op(doc, op)
        except _PatchFailed as exc:
            raise errors.ApiError(
                422, errors.status_dict(422, "Invalid", str(exc), {"causes": [{"message": str(exc)}]})
            ) from None
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchFailed(f"JSON pointer must start with '/': {path}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        node = _child(node, part)
    return node, parts[-1]


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise _PatchFailed(f"doc is missing path: {part}")
        return node[part]
    if isinstance(node, list):
        try:
            return node[int(part)]
        except (ValueError, IndexError):
            raise _PatchFailed(f"unable to access invalid index: {part}") from None
    raise _PatchFailed(f"doc is missing path: {part}")


def _get_path(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        node = _child(node, part)
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _parent(doc, parts)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _index(last, len(parent) + 1)
        parent.insert(index, copy.deepcopy(value))
    else:
        raise _PatchFailed(f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise _PatchFailed("cannot remove the document root")
    parent, last = _parent(doc, parts)
    if isinstance(parent, dict):
        if last not in parent:
            raise _PatchFailed(f"Unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        parent.pop(_index(last, len(parent)))
    else:
        raise _PatchFailed(f"doc is missing path: {path}")
    return doc


def _index(text: str, limit: int) -> int:
    try:
        index = int(text)
    except ValueError:
        raise _PatchFailed(f"invalid array index: {text}") from None
    if index < 0 or index >= limit:
        raise _PatchFailed(f"Unable to access invalid index: {index}")
    return index


def _json_op(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op["op"], op["path"]
    if kind == "add":
        return _add(doc, path, op.get("value"))
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get_path(doc, path)
        return _add(_remove(doc, path), path, op.get("value")) if _pointer(path) else copy.deepcopy(op.get("value"))
    if kind == "move":
        value = _get_path(doc, op["from"])
        return _add(_remove(doc, op["from"]), path, value)
    if kind == "copy":
        return _add(doc, path, _get_path(doc, op["from"]))
    if kind == "test":
        if _get_path(doc, path) != op.get("value"):
            raise _PatchFailed(f"testing value {path} failed: test failed")
        return doc
    raise _PatchFailed(f"Unexpected kind: {kind}")
