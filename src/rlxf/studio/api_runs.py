"""``/api/runs``: the run list, one run's curves and stage times, and its logged rollouts (filtered)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from rlxf.studio.runs import SampleFilter, list_runs, run_detail, run_samples

router = APIRouter(prefix="/api/runs")


@router.get("")
def runs(request: Request) -> list[dict]:
    return list_runs(request.app.state.settings.runs_dir)


@router.get("/detail")
def detail(request: Request, name: str, since: int = -1) -> dict:
    return run_detail(request.app.state.settings.runs_dir, name, since)


@router.get("/samples")
def samples(request: Request, name: str, step_min: int | None = None, step_max: int | None = None,
            reward_min: float | None = None, reward_max: float | None = None, alarm: bool = False,
            truncated: bool = False, offset: int = 0, limit: int = 50) -> dict:
    keep = SampleFilter(step_min, step_max, reward_min, reward_max, alarm, truncated, max(offset, 0), limit)
    return run_samples(request.app.state.settings.runs_dir, name, keep)
