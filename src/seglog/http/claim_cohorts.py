"""SEMANTICS §10.3's coalescing window, on the event loop: with `claim_jitter_ms > 0` the
first claim on a topic opens a cohort and waits the window; claims arriving meanwhile
(polling claims and `/work` refills, with the same lease override) join it; then one claim
pass serves the whole cohort round-robin, so concurrent claimers share the jobs evenly
instead of the first one taking everything."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from seglog.core.leases import Claimer
from seglog.engine.queues import ClaimResult, Job

RunPass = Callable[[str, list[Claimer], "int | None"], Awaitable[ClaimResult]]


@dataclass
class _Cohort:
    result: asyncio.Future[ClaimResult]
    claimers: list[Claimer] = field(default_factory=list)


class ClaimCohorts:
    def __init__(self, run_pass: RunPass) -> None:
        self._run_pass = run_pass
        self._open: dict[tuple[str, int | None], _Cohort] = {}
        self._passes: set[asyncio.Task[None]] = set()

    async def claim(
        self, name: str, claimer: Claimer, lease_ms: int | None, window_ms: int
    ) -> tuple[list[Job], int]:
        """This claimer's jobs and the topic's `ready` count after the pass."""
        if window_ms <= 0:
            res = await self._run_pass(name, [claimer], lease_ms)
            return res.jobs[0], res.ready
        key = (name, lease_ms)
        cohort = self._open.get(key)
        if cohort is None:
            loop = asyncio.get_running_loop()
            cohort = _Cohort(loop.create_future())
            self._open[key] = cohort
            loop.call_later(window_ms / 1000.0, self._close, key, cohort)
        i = len(cohort.claimers)
        cohort.claimers.append(claimer)
        # Shielded: a claimer that goes away does not cancel the pass the others wait for
        # (its share, if any, is leased and expires, or is released with its /work stream).
        res = await asyncio.shield(cohort.result)
        return res.jobs[i], res.ready

    def _close(self, key: tuple[str, int | None], cohort: _Cohort) -> None:
        if self._open.get(key) is cohort:
            del self._open[key]
        task = asyncio.ensure_future(self._serve(key, cohort))
        self._passes.add(task)
        task.add_done_callback(self._passes.discard)

    async def _serve(self, key: tuple[str, int | None], cohort: _Cohort) -> None:
        try:
            res = await self._run_pass(key[0], cohort.claimers, key[1])
        except BaseException as e:  # every member gets the pass's error (404, 409, 500 ...)
            if not cohort.result.done():
                cohort.result.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        cohort.result.set_result(res)
