"""The simulator's own heap: no full collections of Python's cyclic garbage collector.

Why: 20,000 simulated nodes are tens of millions of long-lived objects (stored versions, parsed
objects, kubelet state). CPython's full collection walks every one of them, and at 20,000 nodes it
stopped ``kubesim up`` for 1-6 s at a time while collecting nothing (measured with ``gc.callbacks``):
no Lease renewed, no watch event delivered, requests timed out, and an orchestrator saw healthy
nodes go stale. Those pauses are the simulator's, not the simulated cluster's (a real API server
and its kubelets are separate processes), so ``kubesim up`` runs no full collection: the young
generations are still collected, so a short-lived reference cycle is still freed; an object that
survived two young collections is never walked again. Memory is freed by reference counting as
before; only a reference cycle that dies old is never freed (a little memory, for a simulator).
"""

from __future__ import annotations

import gc

NEVER = 2**30  # young collections between full collections


def no_full_collections() -> None:
    """From now on this process collects only its young generations."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)
