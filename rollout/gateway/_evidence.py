"""Analysis evidence: one ConfigMap per rollout and batch, beside the journal, never in it.

Measurements pile up at every interval of every check; the journal must stay small (it is
written before every action, and an object over the API server's 1 MiB limit cannot be written
at all). So a batch's evidence is its own object, written when a measurement is taken with
optimistic concurrency (its resourceVersion), fenced by the lock like the journal, and bounded
by ``rollout.analysis.evidence``.
"""

from __future__ import annotations

from rollout.analysis import BatchEvidence, evidence_from_data, evidence_to_data
from rollout.errors import ConflictError, NotFoundError
from rollout.names import analysis_configmap_name

from ._configmaps import ConfigMapVerbs, resource_version_of
from ._journals import journal_body


class EvidenceVerbs(ConfigMapVerbs):
    """``load_evidence`` / ``save_evidence`` (the ``EvidenceStore`` port)."""

    def load_evidence(self, rollout: str, batch: int) -> tuple[BatchEvidence, str] | None:
        try:
            obj = self.read_configmap(analysis_configmap_name(rollout, batch))
        except NotFoundError:
            return None
        try:
            evidence = evidence_from_data(dict(obj.get("data") or {}))
        except (KeyError, ValueError, TypeError):
            return None  # not ours, or from another version: the run starts the evidence again
        return evidence, resource_version_of(obj)

    def save_evidence(self, evidence: BatchEvidence, *, resource_version: str | None) -> str:
        name = analysis_configmap_name(evidence.rollout, evidence.batch)
        data = evidence_to_data(evidence)
        body = journal_body(name, self.namespace, evidence.rollout, data)
        try:
            if resource_version is None:
                obj = self._json(f"create analysis evidence {self.namespace}/{name}",
                                 self._fenced(self.core.create_namespaced_config_map), self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = resource_version
                obj = self._json(f"update analysis evidence {self.namespace}/{name}",
                                 self._fenced(self.core.replace_namespaced_config_map), name, self.namespace, body)
        except ConflictError:
            current = self.load_evidence(evidence.rollout, evidence.batch)
            if current is not None and evidence_to_data(current[0]) == data:
                return current[1]  # our own retried write landed
            raise
        return resource_version_of(obj)
