"""``wait.JitterUntil(f, period, 0.2, sliding=true)`` for loops that only work when poked.

Why not a plain ``while: sleep(period)``: 5,000 simulated kubelets each have a config-sync and a
status loop; waking all of them every 10 s to find nothing to do costs real CPU. A poked loop
does work only at its next tick after the poke, and ticks happen on a jittered grid. This class
computes that grid lazily: it sleeps on the poke event, then until the first grid point after
it, which gives the same observable timing (work 0-12 s after a poke) without idle wake-ups.
"""

from __future__ import annotations

import asyncio
import random
from typing import Optional


class JitterTicker:
    """Tick grid with period ``period * (1 + U[0, jitter))``; the first tick is at the first wait."""

    def __init__(self, period: float, jitter: float = 0.2, rng: Optional[random.Random] = None):
        self.period = period
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._next: Optional[float] = None

    def _jittered(self) -> float:
        return self.period * (1.0 + self._rng.random() * self.jitter)

    async def wait_for_work(self, poke: asyncio.Event) -> None:
        """Return at the first tick at which ``poke`` is set; clears it (one-slot channel)."""
        loop = asyncio.get_running_loop()
        if self._next is None:
            self._next = loop.time()  # JitterUntil runs f immediately
        while True:
            if not poke.is_set():
                await poke.wait()
            now = loop.time()
            while self._next < now - 1e-6:  # grid points that passed idle (f ran, found nothing)
                self._next += self._jittered()
            if self._next > now:
                await asyncio.sleep(self._next - now)
            if poke.is_set():
                poke.clear()
                return

    def work_done(self) -> None:
        """Sliding: the next period starts when ``f`` returns."""
        self._next = asyncio.get_running_loop().time() + self._jittered()
