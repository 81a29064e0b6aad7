"""ConfigMaps: the published kubelet configs (the journals, ConfigMaps too, are ``_journals``).

A published config is immutable under a content-hash name, so publishing is idempotent and a
name never changes meaning.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, cast

from rollout.errors import ConflictError
from rollout.model import ConfigRef
from rollout.ports import ConfigMapObject
from rollout.publish import same_published_content

from ._client import ClusterClient

logger = logging.getLogger("rollout.gateway")


def resource_version_of(obj: ConfigMapObject) -> str:
    """The object's ``metadata.resourceVersion`` ("" when it has none)."""
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _resolved(ref: ConfigRef, obj: ConfigMapObject) -> ConfigRef:
    meta = obj.get("metadata") or {}
    return ConfigRef(ref.namespace, ref.name, ref.kubelet_config_key,
                     uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))


class ConfigMapVerbs(ClusterClient):
    """Published configs (see the module doc)."""

    def _init_resource_state(self) -> None:
        super()._init_resource_state()
        self._resolved: dict[tuple[str, str, str], ConfigRef] = {}

    # -- published configs -----------------------------------------------------------------

    def publish_configmap(self, manifest: Mapping[str, Any]) -> ConfigRef:
        """Create the (immutable) ConfigMap and return its resolved reference (uid, rv).

        Idempotent: if a ConfigMap of that name exists with the same ``data``/``binaryData``
        (a re-run, or a create whose response was lost) it is reused. The same name with
        different content is a :class:`ConflictError` - a hashed name must never change meaning.
        The config key is ``kubelet`` when present, else the only data key.
        """
        meta = manifest.get("metadata") or {}
        name = meta.get("name", "")
        namespace = meta.get("namespace") or self.namespace
        body = dict(manifest)
        body["metadata"] = {**meta, "namespace": namespace}
        what = f"create configmap {namespace}/{name}"
        try:
            obj: ConfigMapObject = self._json(what, self.core.create_namespaced_config_map, namespace, body)
            logger.info("published ConfigMap %s/%s", namespace, name)
        except ConflictError as exc:
            if getattr(exc, "reason", "") != "AlreadyExists":
                raise
            obj = self.read_configmap(name, namespace=namespace)
            if not same_published_content(obj, manifest):
                why = ("is not immutable, so it could change under the nodes"
                       if obj.get("immutable") is not True and
                       (obj.get("data") or {}) == (manifest.get("data") or {})
                       else "holds different data")
                raise ConflictError(
                    f"ConfigMap {namespace}/{name} already exists but {why}; a published "
                    "kubelet config must never change under the same name") from exc
            logger.info("ConfigMap %s/%s already published with the same content; reusing it",
                        namespace, name)
        data = manifest.get("data") or {}
        key = "kubelet" if "kubelet" in data or not data else next(iter(data))
        return _resolved(ConfigRef(namespace, name, key), obj)

    def read_configmap(self, name: str, *, namespace: str | None = None) -> ConfigMapObject:
        """A ConfigMap as the API spells it (a plain dict)."""
        namespace = namespace or self.namespace
        return cast(ConfigMapObject, dict(self._json(f"get configmap {namespace}/{name}",
                                                     self.core.read_namespaced_config_map, name, namespace)))

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        """``ref`` with the ConfigMap's current uid and resourceVersion (what status will show)."""
        return _resolved(ref, self.read_configmap(ref.name, namespace=ref.namespace))

    def resolve_cached(self, ref: ConfigRef) -> ConfigRef:
        """``resolve`` once per ConfigMap (published configs are immutable)."""
        key = (ref.namespace, ref.name, ref.kubelet_config_key)
        if key not in self._resolved:
            self._resolved[key] = self.resolve(ref.unresolved())
        return self._resolved[key]
