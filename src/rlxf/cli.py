"""Command line: ``rlxf train [RECIPE] [key=value ...]``, ``rlxf train --resume RUN_DIR``, ``rlxf serve-reward``,
``rlxf eval [RECIPE] [key=value ...] --model PATH [--model PATH]``, ``rlxf plot RUN_DIR ...``,
``rlxf algorithms``, ``rlxf studio [RUNS_DIR]``, ``rlxf prune RUNS_DIR [--apply]``,
``rlxf config show [RECIPE] [key=value ...]``, ``rlxf --version``.
Thin: parse, load config, call a loop. Every error rlxf raises on purpose (``rlxf.errors.RlxfError``) is one
``rlxf:`` line on stderr: exit code 2 for a usage mistake, 1 for a run that failed; ``--debug`` or
``RLXF_DEBUG=1`` adds the traceback."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from rlxf.config import ConfigError
from rlxf.errors import RlxfError


def _split_recipe(args: list[str]) -> tuple[str | None, list[str]]:
    """The first argument is a recipe path unless it looks like key=value; a config key without ``=``
    (``rlxf train train.steps``) is an override that lost its value, not a recipe."""
    if not args or "=" in args[0]:
        return None, args
    from rlxf.config_reference import config_key_exists

    first = args[0]
    if not Path(first).exists() and not first.endswith((".yaml", ".yml")) and config_key_exists(first):
        raise ConfigError(f"override {first!r} has no value: write {first}=VALUE (rlxf config show lists the keys)")
    return first, args[1:]


def _write(text: str) -> None:
    from tqdm import tqdm

    tqdm.write(text)


def cmd_train(ns: argparse.Namespace) -> int:
    from rlxf.checked_config import load_config, refuse_foreign_steps, resume_changes
    from rlxf.loops import get_loop

    recipe, overrides = _split_recipe(ns.args)
    if ns.resume:
        saved = Path(ns.resume) / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"--resume {ns.resume}: no config.yaml there (is it a run directory?)")
        config = load_config(recipe or saved, [*overrides, f"run_dir={ns.resume}"])
        refuse_foreign_steps(config, overrides)
        for line in resume_changes(load_config(saved, [f"run_dir={ns.resume}"]), config):
            _write(line)
    else:
        config = load_config(recipe, overrides)
        refuse_foreign_steps(config, overrides)
    _check_device(config)
    summary = get_loop(config.loop)(config, resume=bool(ns.resume), write=_write)
    print(json.dumps(summary, indent=1))
    if config.logging.plot:
        _plot_finished_run(Path(config.run_dir))
    print(f"run directory: {config.run_dir}")
    stopped_by = summary.get("stopped_by")  # a stop signal ended the run early (loops/stop_signals.py)
    if not stopped_by:
        return 0
    print(f"rlxf: {stopped_by} received: stopped after step {summary['steps']}, which is checkpointed; "
          f"continue with: rlxf train --resume {config.run_dir}", file=sys.stderr)
    return 128 + signal.Signals[stopped_by].value


def _check_device(config) -> None:
    """A ``model.device`` this torch lacks, refused before a run starts (not at load: ``config show`` of a GPU
    recipe works on a laptop)."""
    from rlxf.models.device import device_problem

    problem = device_problem(config.model.device)
    if problem:
        raise ConfigError(problem)


def _plot_finished_run(run_dir: Path) -> None:
    """``plots.png`` next to ``summary.json``; a missing matplotlib is a note, not a failure of the run."""
    try:
        from rlxf.tracking.plot import plot_runs

        print(f"plots: {plot_runs([run_dir], run_dir / 'plots.png')}")
    except ImportError:
        print("plots: skipped (pip install 'rlxf[plot]' for plots.png)")


def cmd_plot(ns: argparse.Namespace) -> int:
    from rlxf.loops.run_dir import check_writable_dir
    from rlxf.tracking.plot import plot_runs

    runs = [Path(d) for d in ns.run_dirs]
    missing = [str(d) for d in runs if not (d / "metrics.jsonl").exists()]
    if missing:
        raise ConfigError(f"rlxf plot: no metrics.jsonl in {', '.join(missing)} (is it a run directory?)")
    out = Path(ns.output) if ns.output else (runs[0] / "plots.png" if len(runs) == 1 else Path("plots.png"))
    if out.is_dir():  # a folder given as --output: the plot goes in it (matplotlib would write FOLDER.png beside it)
        out = out / "plots.png"
    check_writable_dir(out.absolute().parent, "--output's folder")
    try:
        print(plot_runs(runs, out))
    except OSError as err:  # a full disk, a folder where the file should go
        raise ConfigError(f"rlxf plot: cannot write {out} ({err.strerror or err})") from None
    return 0


def cmd_eval(ns: argparse.Namespace) -> int:
    from rlxf.checked_config import load_config
    from rlxf.eval.answers import answer_extractor
    from rlxf.eval.compare import compare_checkpoints
    from rlxf.eval.harness import EvalSettings, evaluate_checkpoint
    from rlxf.loops.run_dir import check_writable_dir, writable_dir
    from rlxf.loops.setup import build_rollout, build_run_context, load_policy

    recipe, overrides = _split_recipe(ns.args)
    config = load_config(recipe, overrides)
    _check_device(config)
    try:
        settings = EvalSettings(
            n=ns.n, ks=sorted(set(ns.k or default_ks(ns.n))), temperature=config.rollout.temperature,
            top_p=config.rollout.top_p, top_k=config.rollout.top_k,
            max_new_tokens=config.eval.max_new_tokens or config.rollout.max_new_tokens,
            batch_size=config.eval.batch_size, seed=config.seed,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    from rlxf.models.loading import is_model_source

    missing = [m for m in ns.model or [] if not Path(m).exists() and not is_model_source(m)]
    if missing:
        raise ConfigError(f"--model {missing[0]}: no such checkpoint folder (nor tiny:NAME, a packaged model "
                          "name or a .gguf file)")
    check_writable_dir(Path(ns.out), "--out")  # before the evaluation, not after it
    context = build_run_context(config)
    reward_name = (config.eval.reward or config.reward).function  # held-out scoring: eval.reward when set
    extract = answer_extractor(reward_name)
    models = ns.model or [context.model_path]
    reports, rows = [], []
    for index, path in enumerate(models):
        policy = load_policy(config, path, context.device)
        rollout = build_rollout(config, policy, context.tokenizer)
        summary, problems = evaluate_checkpoint(rollout, context.eval_reward, context.task.eval, settings, extract,
                                                progress=not ns.quiet)
        reports.append({"model": path, **summary})
        rows += [{"model": index, **p} for p in problems]
        if index:  # each later checkpoint against the first, problem by problem
            reports[-1]["versus_first"] = compare_checkpoints(
                [r for r in rows if r["model"] == 0], problems, settings.ks, config.seed)
    result = {"task": config.data.task, "reward": reward_name, "eval_size": len(context.task.eval), "n": settings.n,
              "ks": settings.ks, "temperature": settings.temperature, "models": reports}
    out = writable_dir(Path(ns.out), "--out")
    (out / "eval.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "eval_problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps(result, indent=1))
    print(f"written: {out / 'eval.json'}, {out / 'eval_problems.jsonl'}", file=sys.stderr)
    return 0


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    return sorted({2**i for i in range(n.bit_length()) if 2**i <= n} | {n})


def cmd_serve_reward(ns: argparse.Namespace) -> int:
    from rlxf.checked_config import load_config
    from rlxf.rewards.registry import build_reward
    from rlxf.rewards.server import ServerSettings, serve, token_from_env

    recipe, overrides = _split_recipe(ns.args)
    cfg = load_config(recipe, overrides).reward
    settings = ServerSettings(
        max_body_bytes=int(ns.max_body_mb * 2**20), max_batch=ns.max_batch, timeout_seconds=ns.timeout,
        workers=ns.workers, merge_requests=not ns.no_merge, token=token_from_env(ns.token_env),
    )
    try:
        serve(build_reward(cfg.function, cfg.kwargs), cfg.function, ns.host, ns.port, settings)
    except (ValueError, ImportError) as err:  # a refused bind or a missing extra: say why, no traceback
        print(f"rlxf: serve-reward: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_sweep(ns: argparse.Namespace) -> int:
    from rlxf.sweep.command import DEFAULT_METRIC, SweepRequest, report_from_disk, run_sweep

    if ns.report:
        if ns.args or ns.per_seed:
            raise ConfigError(f"--report {ns.report} rebuilds a sweep's report from its folder: give no recipe, "
                              "overrides or --per-seed")
        _, table = report_from_disk(Path(ns.report), ns.metric, plot=not ns.no_plot)
        print(table)
        print(f"written: {Path(ns.report) / 'sweep.json'}, {Path(ns.report) / 'sweep.md'}")
        return 0
    recipe, overrides = _split_recipe(ns.args)
    for override in ns.per_seed:
        if "=" not in override or "{seed}" not in override:
            raise ConfigError(f"--per-seed {override}: expected key.path=VALUE with {{seed}} in the value")
    if ns.seeds < 1:
        raise ConfigError(f"--seeds {ns.seeds}: give at least 1 seed")
    from rlxf.loops.run_dir import check_writable_dir

    check_writable_dir(Path(ns.out), "--out")  # before any seed starts or anything is written
    if ns.parallel != "auto" and (not ns.parallel.isdigit() or int(ns.parallel) < 1):
        raise ConfigError(f"--parallel {ns.parallel}: give a number of runs at once (1 or more) or auto")
    return run_sweep(SweepRequest(
        recipe, overrides, list(range(ns.first_seed, ns.first_seed + ns.seeds)), ns.metric or DEFAULT_METRIC,
        None if ns.parallel == "auto" else int(ns.parallel), ns.per_seed, Path(ns.out), plot=not ns.no_plot))


def cmd_prune(ns: argparse.Namespace) -> int:
    from rlxf.disk_space import human_bytes
    from rlxf.train.prune import drop, prune_plan

    root = Path(ns.runs_dir)
    if not root.is_dir():
        raise ConfigError(f"prune: {root} is not a folder")
    items, unfinished = prune_plan(root)
    for item in items:
        print(f"{human_bytes(item.bytes):>9}  {item.path}  {item.why}")
    total = sum(item.bytes for item in items)
    if unfinished:
        print(f"left alone, not finished (they may resume from any checkpoint): {', '.join(map(str, unfinished))}")
    places = f"{len(items)} place{'' if len(items) == 1 else 's'}"
    if ns.apply:
        print(f"dropped {human_bytes(drop(items))} in {places} under {root}")
    else:
        print(f"{human_bytes(total)} can be dropped in {places} under {root}; each finished run's last "
              f"checkpoint stays resumable. To drop it: rlxf prune {root} --apply")
    return 0


def cmd_studio(ns: argparse.Namespace) -> int:
    from rlxf.studio.limits import InputError

    try:
        if ns.export:
            return _export_campaign(ns)
        try:
            from rlxf.studio.server import serve
        except ImportError as err:
            raise ConfigError(f"studio: {err.name} is missing: pip install 'rlxf[studio]'") from None
        serve(ns.runs_dir, ns.host, ns.port, ns.token, ns.db)
    except InputError as err:
        raise ConfigError(f"studio: {err}") from None
    return 0


def _export_campaign(ns: argparse.Namespace) -> int:
    """``rlxf studio RUNS --export ID OUT``: reads an existing label store, creates nothing but OUT."""
    from rlxf.loops.run_dir import check_writable_dir
    from rlxf.studio.export import export_campaign
    from rlxf.studio.server import DB_NAME
    from rlxf.studio.store import Store

    campaign, out = ns.export
    if not campaign.isdigit():
        raise ConfigError(f"studio --export {campaign}: a campaign id is a number (the studio lists them)")
    db = Path(ns.db or Path(ns.runs_dir) / DB_NAME)
    if not db.is_file():
        raise ConfigError(f"studio --export {campaign}: no label store at {db} (no campaign was made there; "
                          "rlxf studio RUNS_DIR makes one)")
    check_writable_dir(Path(out).parent, "--export OUT.jsonl's folder")
    try:
        print(json.dumps(export_campaign(Store(db), int(campaign), out)))
    except OSError as err:
        raise ConfigError(f"studio --export: cannot write {out} ({err.strerror or err})") from None
    return 0


def cmd_config_show(ns: argparse.Namespace) -> int:
    from rlxf.checked_config import load_config
    from rlxf.config import DEFAULT_RECIPE
    from rlxf.config_reference import describe_config

    recipe, overrides = _split_recipe(ns.args)
    config = load_config(recipe, overrides)
    title = f"{recipe or DEFAULT_RECIPE}" + (f" + {' '.join(overrides)}" if overrides else "")
    print(describe_config(config, title), end="")
    return 0


def cmd_algorithms(ns: argparse.Namespace) -> int:
    from rlxf.algos import describe_presets

    print(describe_presets())
    return 0


DEBUG_HELP = "on an rlxf error, print its traceback too (or set RLXF_DEBUG=1)"
CONFIG_POINTER = ("every key, its default and meaning: rlxf config show [RECIPE.yaml] [key=value ...]; "
                  "recipes: src/rlxf/recipes/")


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) + f"\n\n{CONFIG_POINTER}"


def _version() -> str:
    """rlxf's version and the versions it runs with (package metadata: nothing heavy is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (f"rlxf {of('rlxf')} (python {sys.version.split()[0]}, torch {of('torch')}, "
            f"transformers {of('transformers')})")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="rlxf", description="Reinforcement learning from any feedback for LLMs.", formatter_class=formatter,
        epilog=_examples("rlxf train                              # the default recipe: SFT, then GRPO on addition",
                         "rlxf train recipes/dpo.yaml preference.steps=50", "rlxf config show algorithm.name=ppo",
                         "rlxf train --help"))
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, *examples: str) -> argparse.ArgumentParser:
        parsed = sub.add_parser(name, help=help, description=help, epilog=_examples(*examples), formatter_class=formatter)
        # also after the command (rlxf train --debug); SUPPRESS keeps a --debug given before it
        parsed.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        return parsed

    train = command("train", "run a recipe (default: the built-in default recipe)",
                    "rlxf train", "rlxf train algorithm.name=ppo train.steps=50 run_dir=runs/ppo",
                    "rlxf train recipes/dpo.yaml", "rlxf train --resume runs/default")
    train.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    train.set_defaults(func=cmd_train)
    ev = command("eval", "evaluate checkpoints on a recipe's task: accuracy, pass@k, maj@k, paired comparison",
                 "rlxf eval --model runs/default/checkpoints/step_000100/policy --n 16 --k 1 4 16",
                 "rlxf eval --model CKPT_A --model CKPT_B --n 16   # + a paired comparison (docs/evaluation.md)")
    ev.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    ev.add_argument("--model", action="append", metavar="PATH",
                    help="checkpoint folder; repeat to compare (default: the recipe's model.path)")
    ev.add_argument("--n", type=int, default=8, help="samples per problem (default 8)")
    ev.add_argument("--k", type=int, nargs="+", help="k's of pass@k and maj@k (default 1, 2, 4, ... n)")
    ev.add_argument("--out", default="runs/eval", help="folder for eval.json and eval_problems.jsonl")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=cmd_eval)
    plot = command("plot", "one PNG of a run's curves (several runs overlaid)",
                   "rlxf plot runs/default", "rlxf plot runs/default runs/ppo -o compare.png")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("-o", "--output", help="PNG path (default: RUN_DIR/plots.png for one run, ./plots.png for several)")
    plot.set_defaults(func=cmd_plot)
    serve = command("serve-reward", "serve the recipe's reward over HTTP (POST /score)",
                    "rlxf serve-reward --port 8088", "rlxf serve-reward reward.function=math")
    serve.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=int, default=8088)
    serve.add_argument("--token-env", default="RLXF_REWARD_TOKEN",
                       help="environment variable holding the bearer token (required for a non-loopback --host)")
    serve.add_argument("--max-batch", type=int, default=16384, help="most responses per request (413 past it)")
    serve.add_argument("--max-body-mb", type=float, default=256.0, help="largest request body (413 past it)")
    serve.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take (504 past it)")
    serve.add_argument("--workers", type=int, default=4, help="reward calls at once")
    serve.add_argument("--no-merge", action="store_true", help="never merge concurrent requests into one call")
    serve.set_defaults(func=cmd_serve_reward)
    sweep = command("sweep", "run a recipe over several seeds; held-out metric per seed, mean ± std, worst. The same "
                    "command into the same --out continues a sweep: finished seeds are kept, cut ones resume",
                    "rlxf sweep recipes/dpo.yaml --seeds 5", "rlxf sweep train.steps=40 --seeds 3 --out runs/sweep40",
                    "rlxf sweep --report runs/sweep40   # the table from the folders, while it runs or after a cut")
    sweep.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    sweep.add_argument("--seeds", type=int, default=5, help="how many seeds (default 5)")
    sweep.add_argument("--first-seed", type=int, default=0)
    sweep.add_argument("--parallel", default="auto",
                       help="runs at once, one thread each; auto (default): as many as the cores and the memory "
                            "hold (a number that the memory does not hold is refused)")
    sweep.add_argument("--metric", help="held-out metric from metrics.jsonl (default eval/accuracy)")
    sweep.add_argument("--report", metavar="OUT", help="rebuild sweep.json/.md/.png of the sweep in OUT from its "
                       "run folders (finished and unfinished seeds apart) and exit")
    sweep.add_argument("--out", default="runs/sweep", help="folder for the runs, sweep.json/.md/.png")
    sweep.add_argument("--per-seed", action="append", default=[], metavar="KEY=VALUE",
                       help="an override with {seed} in its value, filled in per seed (repeatable), e.g. "
                            "model.path=runs/sft/seed_{seed}/checkpoints/step_000300/policy")
    sweep.add_argument("--no-plot", action="store_true")
    sweep.set_defaults(func=cmd_sweep)
    prune = command("prune", "list what can be dropped under a folder of runs (optimizer states of finished runs' "
                    "checkpoints but the last, checkpoints past their keep rules) with sizes; --apply drops it",
                    "rlxf prune runs", "rlxf prune runs/sweep --apply")
    prune.add_argument("runs_dir", metavar="RUNS_DIR", help="a run directory, or a folder of them (any depth)")
    prune.add_argument("--apply", action="store_true", help="drop what is listed (default: only list it)")
    prune.set_defaults(func=cmd_prune)
    studio = command("studio", "local web app: watch runs, label preferences, train on the labels",
                     "rlxf studio runs", "rlxf studio runs --export 1 prefs.jsonl")
    studio.add_argument("runs_dir", nargs="?", default="runs", help="folder of run directories (default: runs)")
    studio.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    studio.add_argument("--port", type=int, default=8765)
    studio.add_argument("--token", help="access token (any non-loopback bind needs one; made up when not given)")
    studio.add_argument("--db", help="label store (default: RUNS_DIR/studio.sqlite)")
    studio.add_argument("--export", nargs=2, metavar=("CAMPAIGN_ID", "OUT.jsonl"),
                        help="write a campaign's preference JSONL and exit")
    studio.set_defaults(func=cmd_studio)
    algos = command("algorithms", "list the algorithm presets", "rlxf algorithms",
                    "rlxf train algorithm.name=dr_grpo")
    algos.set_defaults(func=cmd_algorithms)
    config = command("config", "show the resolved config", "rlxf config show",
                     "rlxf config show recipes/dpo.yaml preference.loss.name=ipo")
    config_sub = config.add_subparsers(dest="action", required=True)
    show = config_sub.add_parser(
        "show", help="the resolved tree: each key's value, default and meaning (YAML)", formatter_class=formatter,
        description="Print the config a recipe and overrides resolve to, as YAML: each key's value, its default "
                    "(* = changed) and what it means.",
        epilog=_examples("rlxf config show", "rlxf config show recipes/dpo.yaml preference.loss.name=ipo",
                         "rlxf config show algorithm.name=ppo > my_recipe.yaml"))
    show.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    show.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    show.set_defaults(func=cmd_config_show)
    return parser


def parse_command_line(argv: list[str] | None = None) -> argparse.Namespace:
    """Overrides may also come after the options (``rlxf eval RECIPE --model M key=value``): argparse takes
    a command's positionals in one piece, so the ``key=value`` words it leaves are added to them."""
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(ns, "args")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        ns.args = [*ns.args, *extra]
    return ns


def debug_wanted(ns: argparse.Namespace) -> bool:
    """``--debug`` or ``RLXF_DEBUG=1``: an rlxf error also prints its traceback."""
    return bool(getattr(ns, "debug", False)) or os.environ.get("RLXF_DEBUG", "") not in ("", "0")


def one_line(err: BaseException) -> str:
    """The error's message on one line (a message is written as one; this keeps the promise if one is not)."""
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    ns = parse_command_line(argv)
    # As `python -m` does: a reward or task module in the working directory imports by dotted path.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return ns.func(ns)
    except RlxfError as err:  # raised on purpose: a usage mistake (2) or a failed run whose last checkpoint is kept (1)
        if debug_wanted(ns):
            traceback.print_exc()
        print(f"rlxf: {one_line(err)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:  # Ctrl-C before a loop handles signals, or a second stop signal in one
        if debug_wanted(ns):
            traceback.print_exc()
        print(f"rlxf: {_interrupted(err)}", file=sys.stderr)
        return getattr(err, "exit_code", 128 + signal.SIGINT.value)


def _interrupted(err: KeyboardInterrupt) -> str:
    stop = getattr(err, "signal", None)  # loops/stop_signals.py's StoppedAtOnce: the second signal of a run
    if stop is None:
        return "interrupted (Ctrl-C)"
    return (f"a second {stop.name} stopped the run at once: the step in progress is dropped, the last checkpoint "
            "is kept (rlxf train --resume RUN_DIR continues from it; a run without one is left as it was found)")

if __name__ == "__main__":
    sys.exit(main())
