"""The legacy discovery documents (a 1.23 server has no aggregated discovery; ``/version`` is
``kubesim.versions``).

Answered with ``Content-Type: application/json`` whatever the Accept asks for: kubectl then falls
back from aggregated discovery to these documents, exactly as against a real 1.23 API server.
"""

from __future__ import annotations

from typing import Any

from .resources import CORE_RESOURCES, GROUP_RESOURCES, Resource


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(group: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_groups() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, v) for (g, v) in GROUP_RESOURCES]}


def api_group(group: str) -> dict[str, Any] | None:
    for g, v in GROUP_RESOURCES:
        if g == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(g, v)}
    return None


def _entries(resource: Resource) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": resource.name,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resource.verbs),
    }
    if resource.short_names:
        main["shortNames"] = list(resource.short_names)
    entries = [main]
    if "status" in resource.subresources:
        entries.append(
            {
                "name": f"{resource.name}/status",
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if "proxy" in resource.subresources:
        entries.append(
            {
                "name": f"{resource.name}/proxy",
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": "NodeProxyOptions",
                "verbs": ["create", "delete", "get", "patch", "update"],
            }
        )
    if "eviction" in resource.subresources:
        entries.append(
            {
                "name": f"{resource.name}/eviction",
                "singularName": "",
                "namespaced": resource.namespaced,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }
        )
    if "binding" in resource.subresources:
        entries.append(
            {"name": f"{resource.name}/binding", "singularName": "", "namespaced": True, "kind": "Binding",
             "verbs": ["create"]}
        )
    if "token" in resource.subresources:
        entries.append(
            {
                "name": f"{resource.name}/token",
                "singularName": "",
                "namespaced": resource.namespaced,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }
        )
    return entries


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources: tuple[Resource, ...]
    if not group and version == "v1":
        resources = CORE_RESOURCES
    else:
        found = GROUP_RESOURCES.get((group, version))
        if found is None:
            return None
        resources = found
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [e for r in resources for e in _entries(r)],
    }
