"""Fixtures of the Hopper tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def dropped_loop_wait(monkeypatch: pytest.MonkeyPatch, fresh_cache) -> list:  # type: ignore[no-untyped-def]
    """Patches the printer to leave out the first mbarrier wait of a pipeline stage inside the loop
    (a barrier it carries stays), planting a race; returns the list of the waits it dropped.
    fresh_cache: what a patched compile produces must not reach a cache that another test, or the
    next run of this one, reads (a later run once got the racy build from the user's cache without
    printing anything)."""
    from tessera.transpile.emit import tma as tma_emit

    real = tma_emit.print_wait
    dropped: list = []

    def without_the_loop_wait(bp, s):  # type: ignore[no-untyped-def]
        if tma_emit.uses_mbarriers(bp, s) and s.stage is not None and not dropped and "stage" in bp.pr.expr(s.stage):
            dropped.append(s)
            if s.barrier:
                bp.emit("__syncthreads();", s.loc)
            return None
        return real(bp, s)

    monkeypatch.setattr(tma_emit, "print_wait", without_the_loop_wait)
    return dropped
