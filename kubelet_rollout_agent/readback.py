"""Read-back proof: is every field our drop-in sets really in effect on the running kubelet?

A drop-in is *active* only when configz holds each field it sets with the drop-in's value; any
other field is named as an error. The comparison is the core's (``rollout.kubeletconfig.readback``),
so the orchestrator's drift watch judges a node exactly as the agent proved it.

Pure.
"""

from __future__ import annotations

from rollout.kubeletconfig.readback import FieldDifference, differences, not_in_effect, proven_fields, same_value

__all__ = ["FieldDifference", "differences", "not_in_effect", "proven_fields", "same_value"]
