"""The OpenAPI documents ``kubectl edit`` needs (not a full schema).

With strict field validation kubectl asks OpenAPI whether the object's PATCH supports the
``fieldValidation`` query parameter; if it does, kubectl leaves validation to the server. So each
editable kind gets get/put/patch operations with that parameter and its GVK extension - in the v3
JSON documents (kubectl 1.29+) and in the gnostic v2 protobuf (kubectl 1.27/1.28).
"""

from __future__ import annotations

import hashlib
from typing import Any

from .protobuf import field
from .resources import ALL_RESOURCES, Resource

_VERSION = "v1.23.17"


def _paths(resource: Resource) -> tuple[str, str]:
    prefix = "/api/v1" if not resource.group else f"/apis/{resource.group}/{resource.version}"
    ns = "/namespaces/{namespace}" if resource.namespaced else ""
    return f"{prefix}{ns}/{resource.name}", f"{prefix}{ns}/{resource.name}/{{name}}"


def _op(resource: Resource, action: str, verb: str) -> dict[str, Any]:
    return {
        "operationId": f"{verb}{resource.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource.group,
            "version": resource.version,
            "kind": resource.kind,
        },
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
        ],
        "responses": {"200": {"description": "OK"}},
    }


def _gv_doc(group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for resource in ALL_RESOURCES:
        if resource.group != group or resource.virtual:
            continue
        collection, item = _paths(resource)
        paths[collection] = {"post": _op(resource, "post", "create")}
        paths[item] = {"put": _op(resource, "put", "replace"), "patch": _op(resource, "patch", "patch")}
        if "status" in resource.subresources:
            paths[item + "/status"] = {
                "put": _op(resource, "put", "replaceStatus"),
                "patch": _op(resource, "patch", "patchStatus"),
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": _VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }


V3_DOCS = {
    "api/v1": _gv_doc("", "v1"),
    "apis/coordination.k8s.io/v1": _gv_doc("coordination.k8s.io", "v1"),
    "apis/rbac.authorization.k8s.io/v1": _gv_doc("rbac.authorization.k8s.io", "v1"),
    "apis/policy/v1": _gv_doc("policy", "v1"),
}


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha512(repr(doc).encode()).hexdigest()[:128].upper()


def v3_root() -> dict[str, Any]:
    return {
        "paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(doc)}"} for path, doc in V3_DOCS.items()}
    }


# --- v2 (gnostic openapi.v2.Document protobuf) -------------------------------------------------


def _v2_operation(resource: Resource, verb: str) -> bytes:
    query = field(2, "query") + field(4, "fieldValidation") + field(6, "string")
    parameter = field(1, field(2, field(3, query)))  # ParametersItem{Parameter{NonBody{Query}}}
    gvk = f'- group: "{resource.group}"\n  kind: {resource.kind}\n  version: {resource.version}\n'
    extension = field(1, "x-kubernetes-group-version-kind") + field(2, field(2, gvk))
    return field(5, f"{verb}{resource.kind}") + field(8, parameter) + field(13, extension)


def _v2_path(name: str, item: bytes) -> bytes:
    return field(2, field(1, name) + field(2, item))


def v2_protobuf() -> bytes:
    paths = b""
    for resource in ALL_RESOURCES:
        if resource.virtual:
            continue
        _, item = _paths(resource)
        path_item = field(3, _v2_operation(resource, "put")) + field(8, _v2_operation(resource, "patch"))
        paths += _v2_path(item, path_item)
        if "status" in resource.subresources:
            paths += _v2_path(item + "/status", path_item)
    info = field(1, "Kubernetes") + field(2, _VERSION)
    return field(1, "2.0") + field(2, info) + field(8, paths)


V2_CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
