"""Journals: a rollout's state as a head ConfigMap and its parts, committed together, and the
lifecycle requests posted on the head.

The codec (``rollout.journal.configmap``) splits a journal into a head and parts, each far below
the API server's 1 MiB; this module stores them so that a process dying at any moment leaves a
whole journal behind, the last one it committed:

* every part has two slots (ConfigMaps ``<head>.<part>a`` and ``<head>.<part>b``); a save writes
  each part that changed into the slot *not* in use, and only parts that changed;
* then the head, compare-and-swap on its resourceVersion, naming in its table (data key
  ``parts``) the slot each part is in now, that slot's resourceVersion and a digest of its data.
  The head's write is the commit: until it lands, the journal is the previous one, whole; a
  spare slot written by a process that died first is simply written over next time.

Loading reads the head, then exactly the slots it names, and checks each one's resourceVersion
against the table, so a torn or foreign journal is refused, never half-read. A slot is written
with its own resourceVersion known (or created), never blindly: another object under that name
(another rollout's, say) is refused, never overwritten. No journal ConfigMap is ever deleted by a
run (the ServiceAccount may not delete ConfigMaps): a rollout leaves its head and at most two
ConfigMaps per part, labelled with its name.

A person's request (``rollout pause`` ...) is an annotation on the head, so it never races the
engine's writes of the data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rollout.errors import ConflictError, GatewayError, NotFoundError, TransientGatewayError
from rollout.journal import JournalDocument
from rollout.names import (
    ANN_REQUEST,
    COMPONENT,
    JOURNAL_PREFIX,
    JOURNAL_SLOTS,
    LABEL_JOURNAL_PART,
    LABEL_MANAGED_BY,
    LABEL_ROLLOUT,
    journal_configmap_name,
    journal_part_name,
    label_value,
)
from rollout.ports import ConfigMapObject

from ._client import own_stop
from ._configmaps import ConfigMapVerbs, resource_version_of
from ._wire import micro_time

logger = logging.getLogger("rollout.gateway")

# a reader racing the writer: its head named part slots the writer has written over since (two
# commits later); it reads the new head and its parts again, this many times at most
READ_ATTEMPTS = 5
TABLE_KEY = "parts"  # the head's table of parts: the store's key, never the codec's
# parts written at once by one save (20,000 nodes make seven; a batch's end rewrites four of them)
PART_WRITERS = 4


def journal_body(name: str, namespace: str, rollout: str, data: Mapping[str, str], *,
                 part: str = "") -> dict[str, Any]:
    """A journal ConfigMap (head, or one slot of ``part``), labelled with its rollout so ``rollout
    list`` finds every head by one selector and ``kubectl get cm -l`` every piece of a rollout."""
    labels = {LABEL_ROLLOUT: label_value(rollout), LABEL_MANAGED_BY: COMPONENT}
    if part:
        labels[LABEL_JOURNAL_PART] = part
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": dict(data)}


def digest(data: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PartEntry:
    """Where one part stands: the slot in use, both slots' resourceVersions ("" = never written),
    and the digest of the data in use."""

    slot: str
    versions: Mapping[str, str]
    digest: str

    @property
    def spare(self) -> str:
        return JOURNAL_SLOTS[1 - JOURNAL_SLOTS.index(self.slot)]

    def to_json(self, key: str) -> list[str]:
        return [key, self.slot, self.versions.get("a", ""), self.versions.get("b", ""), self.digest]


Table = dict[str, PartEntry]


def _table(head: Mapping[str, str]) -> Table:
    """The head's table of parts (none in a head of the previous format)."""
    raw = head.get(TABLE_KEY)
    if not raw:
        return {}
    return {key: PartEntry(slot, {"a": rv_a, "b": rv_b}, digest_)
            for key, slot, rv_a, rv_b, digest_ in json.loads(raw)}


class JournalVerbs(ConfigMapVerbs):
    """Journals and lifecycle requests (see the module doc)."""

    def _init_resource_state(self) -> None:
        super()._init_resource_state()
        # the table each head was last seen with, by (rollout, head resourceVersion): a save from
        # the version it loaded or wrote needs no read of the head first
        self._tables: dict[str, tuple[str, Table]] = {}

    @staticmethod
    def journal_name(rollout: str) -> str:
        """``kubelet-rollout-journal-<rollout>`` (``rollout.names``): the head."""
        return journal_configmap_name(rollout)

    # -- reading ---------------------------------------------------------------------------

    def load_journal(self, rollout: str) -> tuple[JournalDocument, str] | None:
        """The journal (head and parts, as committed) and the head's resourceVersion; None if
        there is none. A part missing or not the one the head names is a ``GatewayError``."""
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        for _ in range(READ_ATTEMPTS):
            try:
                return self._document(rollout, obj)
            except GatewayError as exc:  # a part is not the one this head names: committed over since?
                try:
                    newer = self.read_configmap(self.journal_name(rollout))
                except NotFoundError:
                    return None
                if resource_version_of(newer) == resource_version_of(obj):
                    raise exc  # the head is still the one read: the part itself is wrong
                obj = newer  # read once: the next attempt reads the parts this head names
        raise TransientGatewayError(f"the journal of rollout {rollout!r} changed at every read "
                                    f"({READ_ATTEMPTS} reads); read it again")

    def _document(self, rollout: str, head_obj: ConfigMapObject) -> tuple[JournalDocument, str]:
        head = dict(head_obj.get("data") or {})
        rv = resource_version_of(head_obj)
        table = _table(head)
        parts = {key: self._read_part(rollout, key, entry) for key, entry in table.items()}
        self._tables[rollout] = (rv, table)
        head.pop(TABLE_KEY, None)
        return JournalDocument(head=head, parts=parts), rv

    def _read_part(self, rollout: str, key: str, entry: PartEntry) -> dict[str, str]:
        name = journal_part_name(rollout, key, entry.slot)
        try:
            obj = self.read_configmap(name)
        except NotFoundError:
            raise GatewayError(f"the journal of rollout {rollout!r} is incomplete: its part {name} is missing "
                               "(deleted by hand?); `rollout rollback` can still rebuild it from the nodes") from None
        found = resource_version_of(obj)
        if found != entry.versions.get(entry.slot):
            raise ConflictError(f"the journal part {name} of rollout {rollout!r} was changed by another writer "
                                f"(resourceVersion {found}, committed {entry.versions.get(entry.slot)})")
        return dict(obj.get("data") or {})

    def list_journals(self) -> list[JournalDocument]:
        """Every rollout's journal (``rollout list``): the heads by one list, then their parts."""
        body = self._json(f"list journals in {self.namespace}", self.core.list_namespaced_config_map,
                          self.namespace, label_selector=f"{LABEL_MANAGED_BY}={COMPONENT},!{LABEL_JOURNAL_PART}",
                          timeout=self.list_timeout)
        found = []
        for item in body.get("items") or []:
            name = str((item.get("metadata") or {}).get("name", ""))
            if not name.startswith(JOURNAL_PREFIX):
                continue
            try:
                found.append(self._document(name.removeprefix(JOURNAL_PREFIX), item)[0])
            except GatewayError as exc:
                logger.warning("journal %s: %s", name, exc)
        return found

    # -- writing ---------------------------------------------------------------------------

    def save_journal(self, rollout: str, document: JournalDocument, *, resource_version: str | None) -> str:
        """Commit ``document``; returns the head's new resourceVersion.

        ``resource_version=None`` creates the journal (a head already there -> ``ConflictError``);
        otherwise the head is replaced only if it is still at ``resource_version`` (another writer
        -> ``ConflictError``: re-load and decide again). The parts that changed go to their spare
        slots first (see the module doc). A conflict caused by our own retried write of the head
        (the first attempt landed, its answer was lost) is recognised by reading back the same
        data, and reported as success.
        """
        table = self._table_at(rollout, resource_version)
        committed = self._write_parts(rollout, document.parts, table)
        head = {**document.head,
                TABLE_KEY: json.dumps([entry.to_json(key) for key, entry in sorted(committed.items())])}
        name = self.journal_name(rollout)
        body = journal_body(name, self.namespace, rollout, head)
        try:
            if resource_version is None:
                obj = self._json(f"create journal {self.namespace}/{name}",
                                 self._fenced(self.core.create_namespaced_config_map), self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = resource_version
                obj = self._json(f"update journal {self.namespace}/{name}",
                                 self._fenced(self.core.replace_namespaced_config_map), name, self.namespace, body)
        except ConflictError:
            current = self._head_data(rollout)
            if current is None or current[0] != head:
                raise
            obj = {"metadata": {"resourceVersion": current[1]}}
        rv = resource_version_of(obj)
        self._tables[rollout] = (rv, committed)
        return rv

    def _table_at(self, rollout: str, resource_version: str | None) -> Table:
        """The table of the head at ``resource_version`` (none for a new journal)."""
        if resource_version is None:
            return {}
        seen = self._tables.get(rollout)
        if seen is not None and seen[0] == resource_version:
            return seen[1]
        current = self._head_data(rollout)
        if current is None or current[1] != resource_version:
            raise ConflictError(f"the journal of rollout {rollout!r} was changed by another process "
                                "(is the same rollout running twice?)")
        return _table(current[0])

    def _head_data(self, rollout: str) -> tuple[dict[str, str], str] | None:
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        return dict(obj.get("data") or {}), resource_version_of(obj)

    def _write_parts(self, rollout: str, parts: Mapping[str, Mapping[str, str]], table: Table) -> Table:
        """Every part into its spare slot, side by side: the end of a large batch rewrites several
        (each of its parts' nodes changed phase), and one after the other they held up the save
        that records it. The head, written after all of them, is still the one commit."""
        stop = own_stop()  # a worker inherits the caller's way of being cut short

        def one(key: str) -> PartEntry:
            with self.cut_short_by(stop) if stop is not None else contextlib.nullcontext():
                return self._write_part(rollout, key, parts[key], table.get(key))

        if len(parts) <= 1:
            return {key: one(key) for key in parts}
        with ThreadPoolExecutor(max_workers=min(PART_WRITERS, len(parts)), thread_name_prefix="journal") as pool:
            written = {key: pool.submit(one, key) for key in parts}
        return {key: future.result() for key, future in written.items()}

    def _write_part(self, rollout: str, key: str, data: Mapping[str, str], entry: PartEntry | None) -> PartEntry:
        """``data`` into the part's spare slot (nothing when the slot in use holds it already)."""
        sum_ = digest(data)
        if entry is not None and entry.digest == sum_:
            return entry
        slot = entry.spare if entry is not None else JOURNAL_SLOTS[0]
        known = entry.versions.get(slot, "") if entry is not None else ""
        name = journal_part_name(rollout, key, slot)
        body = journal_body(name, self.namespace, rollout, data, part=key)
        for _ in range(3):
            try:
                if known:
                    body["metadata"]["resourceVersion"] = known
                    obj = self._json(f"update journal part {self.namespace}/{name}",
                                     self._fenced(self.core.replace_namespaced_config_map), name, self.namespace, body)
                else:
                    body["metadata"].pop("resourceVersion", None)
                    obj = self._json(f"create journal part {self.namespace}/{name}",
                                     self._fenced(self.core.create_namespaced_config_map), self.namespace, body)
                break
            except (ConflictError, NotFoundError):
                # the slot is not where we last left it (a process that died before its commit,
                # or a retried write whose answer was lost): look, and write over it only if ours
                known = self._spare_version(rollout, name, key)
        else:
            raise ConflictError(f"could not write the journal part {self.namespace}/{name}: it keeps changing")
        rv = resource_version_of(obj)
        versions = dict(entry.versions) if entry is not None else {}
        return PartEntry(slot, {**versions, slot: rv}, sum_)

    def _spare_version(self, rollout: str, name: str, key: str) -> str:
        """The resourceVersion of a spare slot as it stands ("" when there is none), refusing an
        object under that name that is not this rollout's journal part."""
        try:
            obj = self.read_configmap(name)
        except NotFoundError:
            return ""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_JOURNAL_PART) != key or labels.get(LABEL_ROLLOUT) != label_value(rollout):
            raise ConflictError(f"ConfigMap {self.namespace}/{name} exists and is not a part of rollout "
                                f"{rollout!r}'s journal; pick another rollout name")
        return resource_version_of(obj)

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

    def delete_journal(self, rollout: str) -> None:
        """Remove the journal's head (tests and administrators; a run never deletes one)."""
        name = self.journal_name(rollout)
        with contextlib.suppress(NotFoundError):
            self._raw(f"delete journal {self.namespace}/{name}",
                      self.core.delete_namespaced_config_map, name, self.namespace)


__all__ = ["TABLE_KEY", "JournalVerbs", "PartEntry", "digest", "journal_body"]
