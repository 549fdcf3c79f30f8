"""``rlxf sweep``: plan each seed from what its folder holds, size the parallelism to the memory, run the
seeds, and rewrite the report each time one ends; ``rlxf sweep --report OUT`` rebuilds the report from disk.

Running the same sweep into the same ``--out`` again continues it: finished seeds are kept (their folders
are not touched), a seed cut mid-run resumes from its last checkpoint, and new seeds start. A seed whose
saved config differs from the one asked for now is refused before anything runs, naming the keys.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlxf.checked_config import load_config, refuse_foreign_steps
from rlxf.config_error import ConfigError
from rlxf.errors import RlxfError
from rlxf.sweep import memory
from rlxf.sweep.metrics import unknown_metric
from rlxf.sweep.report import write_report
from rlxf.sweep.runs import (
    ForwardedStop,
    SeedLaunch,
    read_manifest,
    read_seed,
    resume_command,
    run_overrides,
    run_seeds,
    seed_dirs,
    seed_overrides,
    train_command,
    write_manifest,
)
from rlxf.sweep.seed_state import FINISHED, NEW, config_difference, seed_state

DEFAULT_METRIC = "eval/accuracy"


@dataclass
class SweepRequest:
    recipe: str | None
    overrides: list[str]
    seeds: list[int]
    metric: str
    parallel: int | None  # None: as many as the cores and the memory allow (--parallel auto)
    per_seed: list[str]
    out: Path
    plot: bool = True


@dataclass
class SweepPlan:
    launches: list[SeedLaunch]
    kept: list[int]  # finished earlier: not run again
    first_config: object  # the resolved config of the first seed (the memory estimate reads it)


def plan_sweep(request: SweepRequest) -> SweepPlan:
    """Each seed's config checked (a wrong key fails here, once), and what to do with it: keep, continue, start."""
    launches, kept, first = [], [], None
    for seed in request.seeds:
        run_dir = request.out / f"seed_{seed}"
        overrides = run_overrides([*request.overrides, *seed_overrides(request.per_seed, seed)], seed, run_dir)
        wanted = load_config(request.recipe, overrides)
        refuse_foreign_steps(wanted, [*request.overrides, *request.per_seed])  # as rlxf train would, once
        first = first or wanted
        state = seed_state(run_dir)
        if state != NEW:
            saved = load_config(str(run_dir / "config.yaml"), [])
            difference = config_difference(saved.model_dump(mode="json"), wanted.model_dump(mode="json"))
            if difference:
                raise ConfigError(f"sweep: {run_dir} ran with another config ({difference}): run the sweep with "
                                  "the settings it had, or give another --out")
        if state == FINISHED:
            kept.append(seed)
        else:
            command = train_command(request.recipe, [*request.overrides, *seed_overrides(request.per_seed, seed)],
                                    seed, run_dir) if state == NEW else resume_command(run_dir)
            launches.append(SeedLaunch(seed, run_dir, command, continues=state != NEW))
    why = unknown_metric(request.metric, first.loop)
    if why:
        raise ConfigError(why)
    return SweepPlan(launches, kept, first)


def seed_memory(plan: SweepPlan, out: Path, write: Callable[[str], None]) -> memory.SeedMemory | None:
    """A finished seed's measured peak, else the estimate from the config; None when neither can be had."""
    measured = memory.measured_peak([out / f"seed_{seed}" for seed in plan.kept])
    if measured is not None:
        return measured
    try:
        return memory.estimate_config_mb(plan.first_config)
    except RlxfError:
        raise
    except Exception as err:  # an architecture the meta device cannot build: run, but say so
        write(f"memory: no estimate of a seed's peak ({type(err).__name__}: {err}); not sized to the memory")
        return None


def choose_parallel(asked: int | None, to_run: int, need: memory.SeedMemory | None, available: float,
                    write: Callable[[str], None]) -> int:
    """``asked`` (None: auto) against what fits: auto takes min(cores, seeds to run, what fits); an explicit
    number that does not fit is refused with the estimate."""
    cap = min(asked or memory.default_parallel(), max(to_run, 1))
    if need is None:
        return cap
    fits = memory.seeds_that_fit(need.mb, available)
    said = (f"a seed needs about {need.mb:,.0f} MB ({need.source}); {available:,.0f} MB is available, "
            f"{memory.margin_mb(available):,.0f} MB kept free: {fits} fit at once")
    if asked is not None and cap > fits:
        raise ConfigError(f"--parallel {asked}: {said}; use --parallel {max(fits, 1)} or --parallel auto")
    chosen = max(1, min(cap, fits))
    write(f"memory: {said}; running {chosen} at once" + (" (even one may not fit)" if fits == 0 else ""))
    return chosen


def run_sweep(request: SweepRequest, write: Callable[[str], None] = print) -> int:
    if not request.seeds:
        raise ConfigError("--seeds: give at least 1 seed")
    plan = plan_sweep(request)
    out = request.out
    for seed in plan.kept:
        write(f"seed {seed}: finished earlier, kept ({out / f'seed_{seed}'})")
    for launch in plan.launches:
        if launch.continues:
            write(f"seed {launch.seed}: continues from its last checkpoint ({launch.run_dir})")
    parallel = 1
    if plan.launches:
        need = seed_memory(plan, out, write)
        parallel = choose_parallel(request.parallel, len(plan.launches), need, memory.available_mb(), write)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, {"recipe": request.recipe, "overrides": request.overrides, "per_seed": request.per_seed,
                         "seeds": request.seeds, "metric": request.metric})
    title = f"{request.recipe or 'default recipe'}: {len(request.seeds)} seeds"
    codes: dict[int, int] = {}

    def report() -> tuple[dict, str]:
        runs = [read_seed(out / f"seed_{seed}", seed, request.metric, codes.get(seed)) for seed in request.seeds]
        return write_report(out, runs, request.metric, title, request.plot)

    def seed_ended(seed: int, returncode: int) -> None:
        codes[seed] = returncode
        report()

    stop = ForwardedStop().install()
    try:
        run_seeds(plan.launches, out, parallel, stop, seed_ended)
    finally:
        stop.restore()
    summary, table = report()
    write(table)
    write(f"written: {out / 'sweep.json'}, {out / 'sweep.md'}" + (f", {out / 'sweep.png'}" if request.plot else ""))
    if stop.requested is not None:
        write(f"{stop.requested.name} received: the running seeds stopped at a checkpoint; continue with: "
              f"rlxf {shlex.join(sys.argv[1:])}")
        return 128 + stop.requested.value
    if summary["complete"]:
        return 0
    failed = summary["failed"]  # a seed failed (or, never here, was left unfinished): say which, and why, on stderr
    if failed:
        first = failed[0]
        print(f"rlxf: sweep: {len(failed)} of {len(request.seeds)} seeds failed; seed {first['seed']} (exit "
              f"{first['returncode']}): {last_error_line(Path(first['log']))} (its log: {first['log']})",
              file=sys.stderr)
    return 1


def last_error_line(log: Path) -> str:
    """The last ``rlxf:`` line of a seed's log (its one-line error), else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line.removeprefix("rlxf: ") for line in lines if line.startswith("rlxf: ")]
    return (errors or lines or ["empty log"])[-1][:300]


def report_from_disk(out: Path, metric: str | None, plot: bool = True) -> tuple[dict, str]:
    """The report of the sweep in ``out`` as its folders are now (``rlxf sweep --report OUT``)."""
    manifest = read_manifest(out)
    seeds = manifest.get("seeds") or list(seed_dirs(out))
    if not seeds:
        raise ConfigError(f"--report {out}: no sweep there (no sweep_args.json, no seed_N folders)")
    metric = metric or manifest.get("metric") or DEFAULT_METRIC
    runs = [read_seed(out / f"seed_{seed}", seed, metric) for seed in seeds]
    return write_report(out, runs, metric, f"{manifest.get('recipe') or 'default recipe'}: {len(seeds)} seeds", plot)
