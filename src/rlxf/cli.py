"""Command line: ``rlxf train [RECIPE] [key=value ...]``, ``rlxf train --resume RUN_DIR``, ``rlxf serve-reward``,
``rlxf eval [RECIPE] [key=value ...]``, ``rlxf algorithms``. Thin: parse, load config, call a loop."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlxf.config import ConfigError


def _split_recipe(args: list[str]) -> tuple[str | None, list[str]]:
    """The first argument is a recipe path unless it looks like key=value."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


def _write(text: str) -> None:
    from tqdm import tqdm

    tqdm.write(text)


def cmd_train(ns: argparse.Namespace) -> int:
    from rlxf.config import load_config
    from rlxf.loops import get_loop

    recipe, overrides = _split_recipe(ns.args)
    if ns.resume:
        saved = Path(ns.resume) / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"--resume {ns.resume}: no config.yaml there (is it a run directory?)")
        config = load_config(recipe or saved, [*overrides, f"run_dir={ns.resume}"])
    else:
        config = load_config(recipe, overrides)
    summary = get_loop(config.loop)(config, resume=bool(ns.resume), write=_write)
    print(json.dumps(summary, indent=1))
    print(f"run directory: {config.run_dir}")
    return 0


def cmd_eval(ns: argparse.Namespace) -> int:
    from rlxf.config import load_config
    from rlxf.eval.accuracy import evaluate
    from rlxf.loops.setup import build_basics, build_rollout, load_policy

    recipe, overrides = _split_recipe(ns.args)
    config = load_config(recipe, overrides)
    basics = build_basics(config)
    path = ns.model or basics.model_path
    policy = load_policy(config, path, basics.device)
    rollout = build_rollout(config, policy, basics.tokenizer)
    tokens = config.eval.max_new_tokens or config.rollout.max_new_tokens
    result = evaluate(rollout, basics.reward, basics.task.eval, config.eval.batch_size, tokens)
    print(json.dumps({"model": path, "eval_size": len(basics.task.eval), **result}, indent=1))
    return 0


def cmd_serve_reward(ns: argparse.Namespace) -> int:
    from rlxf.config import load_config
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
        print(err, file=sys.stderr)
        return 2
    return 0


def cmd_algorithms(ns: argparse.Namespace) -> int:
    from rlxf.algos import describe_presets

    print(describe_presets())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlxf", description="Reinforcement learning from any feedback for LLMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run a recipe (default: the built-in default recipe)")
    train.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    train.set_defaults(func=cmd_train)
    ev = sub.add_parser("eval", help="held-out evaluation of a model on a recipe's task")
    ev.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    ev.add_argument("--model", help="model folder (default: the recipe's model.path)")
    ev.set_defaults(func=cmd_eval)
    serve = sub.add_parser("serve-reward", help="serve the recipe's reward over HTTP (POST /score)")
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
    algos = sub.add_parser("algorithms", help="list the algorithm presets")
    algos.set_defaults(func=cmd_algorithms)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except ConfigError as err:
        print(f"rlxf: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
