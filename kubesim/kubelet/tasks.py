"""Cancelling a process's tasks reliably.

Why: on Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that races with the inner
future completing (fixed in 3.12). A watch stream waiting that way would leave a cancelled
informer task running forever, and a kubelet "process" that should exit would hang in its
teardown. Re-cancelling until every task is done makes teardown independent of that race.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable


async def cancel_all(tasks: Iterable["asyncio.Task[Any]"], *, attempts: int = 100, interval: float = 0.05) -> None:
    """Cancel ``tasks`` and wait until they are all done, cancelling again as needed."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(attempts):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=interval)
