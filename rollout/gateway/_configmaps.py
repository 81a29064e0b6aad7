"""ConfigMaps: the published kubelet configs, the rollout journals and the lifecycle requests on them.

A published config is immutable under a content-hash name, so publishing is idempotent and a
name never changes meaning. A journal is one ConfigMap per rollout, written with optimistic
concurrency (its resourceVersion) and fenced by the lock; a person's request (``rollout pause``
...) is an annotation on it, so it never races the engine's writes of the data.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Mapping, cast

from rollout.errors import ConflictError, NotFoundError
from rollout.model import ConfigRef
from rollout.names import (
    ANN_REQUEST,
    COMPONENT,
    JOURNAL_PREFIX,
    LABEL_MANAGED_BY,
    LABEL_ROLLOUT,
    journal_configmap_name,
)
from rollout.ports import ConfigMapObject
from rollout.publish import same_published_content

from ._client import ClusterClient
from ._wire import micro_time

logger = logging.getLogger("rollout.gateway")


def journal_body(name: str, namespace: str, rollout: str, data: Mapping[str, str]) -> dict[str, Any]:
    """A journal ConfigMap, labelled so ``rollout list`` finds every journal by one selector."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {LABEL_ROLLOUT: rollout, LABEL_MANAGED_BY: COMPONENT}},
        "data": dict(data),
    }


def _resolved(ref: ConfigRef, obj: ConfigMapObject) -> ConfigRef:
    meta = obj.get("metadata") or {}
    return ConfigRef(ref.namespace, ref.name, ref.kubelet_config_key,
                     uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))


class ConfigMapVerbs(ClusterClient):
    """Published configs, journals and lifecycle requests (see the module doc)."""

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

    # -- journal ---------------------------------------------------------------------------

    @staticmethod
    def journal_name(rollout: str) -> str:
        """``kubelet-rollout-journal-<rollout>`` (``rollout.names``)."""
        return journal_configmap_name(rollout)

    def load_journal(self, rollout: str) -> tuple[dict[str, str], str] | None:
        """The rollout's journal ConfigMap data and resourceVersion; None if there is none."""
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        return dict(obj.get("data") or {}), str((obj.get("metadata") or {}).get("resourceVersion", ""))

    def save_journal(self, rollout: str, data: Mapping[str, str], *,
                     resource_version: str | None) -> str:
        """Write the journal; returns its new resourceVersion.

        ``resource_version=None`` creates it (exists already -> ``ConflictError``); otherwise it
        replaces the ConfigMap only if it is still at ``resource_version`` (optimistic
        concurrency: another writer -> ``ConflictError``; re-load and decide again). A conflict
        caused by our own retried write (the first attempt landed, its answer was lost) is
        recognised by reading back identical data, and reported as success.
        """
        name = self.journal_name(rollout)
        body = journal_body(name, self.namespace, rollout, data)
        try:
            if resource_version is None:
                obj = self._json(f"create journal {self.namespace}/{name}",
                                 self._fenced(self.core.create_namespaced_config_map), self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = resource_version
                obj = self._json(f"update journal {self.namespace}/{name}",
                                 self._fenced(self.core.replace_namespaced_config_map), name, self.namespace, body)
        except ConflictError:
            current = self.load_journal(rollout)
            if current is not None and current[0] == dict(data):
                return current[1]
            raise
        return str((obj.get("metadata") or {}).get("resourceVersion", ""))

    def list_journals(self) -> list[dict[str, str]]:
        """Every rollout's journal ConfigMap data (``rollout list``), by the label its saves carry."""
        body = self._json(f"list journals in {self.namespace}", self.core.list_namespaced_config_map,
                          self.namespace, label_selector=f"{LABEL_MANAGED_BY}={COMPONENT}",
                          timeout=self.list_timeout)
        return [dict(item.get("data") or {}) for item in body.get("items") or []
                if str((item.get("metadata") or {}).get("name", "")).startswith(JOURNAL_PREFIX)]

    def delete_journal(self, rollout: str) -> None:
        """Remove the journal (missing is fine)."""
        name = self.journal_name(rollout)
        with contextlib.suppress(NotFoundError):
            self._raw(f"delete journal {self.namespace}/{name}",
                      self.core.delete_namespaced_config_map, name, self.namespace)

    # -- lifecycle requests ----------------------------------------------------------------

    def read_request(self, rollout: str) -> dict[str, str] | None:
        """The pending lifecycle request on the rollout's journal (``rollout pause`` ...), if any."""
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_REQUEST)
        try:
            request = json.loads(raw) if raw else None
        except ValueError:
            return None
        return {str(k): str(v) for k, v in request.items()} if isinstance(request, dict) else None

    def post_request(self, rollout: str, action: str, *, by: str, request_id: str) -> None:
        """Ask the running rollout to pause/resume/abort/promote: an annotation on its journal.

        The journal's data is left alone (the running engine owns it); the engine reads the
        annotation within a few seconds, applies it once (by id) and journals the result.
        """
        name = self.journal_name(rollout)
        body = json.dumps({"id": request_id, "action": action, "by": by, "at": micro_time(self._now())})
        for _ in range(5):
            obj = self.read_configmap(name)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("annotations", {})[ANN_REQUEST] = body
            try:
                self._json(f"update journal {self.namespace}/{name}", self.core.replace_namespaced_config_map,
                           name, self.namespace, obj)
                return
            except ConflictError:
                continue  # the engine wrote the journal meanwhile: read again
        raise ConflictError(f"could not annotate {self.namespace}/{name}: it keeps changing")
