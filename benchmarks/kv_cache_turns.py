"""Multi-turn rollouts: KV cache kept across turns vs re-prefilling the transcript every turn.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/kv_cache_turns.py [--turns 2,4,8,16] [--reps 3] \\
        [--models tiny,smollm2] [--rows 8] [--new 16] [--obs 16]

A rollout of ``--rows`` trajectories, each ``T`` policy turns of exactly ``--new`` tokens (end-of-sequence
disabled: an id no token has) with an observation of ``--obs`` tokens after every turn, so every system
does the same decoding and the transcript grows to ``prompt + T * (new + obs)`` tokens. Systems, each a
full ``EnvRolloutRole.generate`` on the torch engine, alternating:

* ``kept``: ``env.keep_kv_cache: true`` (the default): each turn prefills only its new tokens;
* ``reprefill``: ``keep_kv_cache: false``: the same continuous batching, every turn prefills the whole
  transcript;
* ``generate``: today's path before the change: lockstep turns, one ``engine.generate`` per turn over
  the transcripts (``turn_barrier: true`` and an engine without turn sessions).

Models (random weights, built here, nothing downloaded): ``tiny`` is the default recipe's tiny Llama
(hidden 256, 4 layers, 4 heads, 3.2M parameters, character vocabulary of 100); ``smollm2`` is
SmolLM2-135M's architecture (hidden 576, 9 query / 3 KV heads, head_dim 64, MLP 1536, tied embeddings,
rope theta 1e5) cut to 4 layers, with the character vocabulary. ``step_s`` is the median seconds of one
rollout (``cpu_s`` its CPU time, steadier on a shared machine), ``tokens_per_s`` policy tokens over it,
``prefilled`` the tokens the sessions ran through prefill.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from rlxf.config import EnvConfig  # noqa: E402
from rlxf.envs.base import ENVS  # noqa: E402
from rlxf.models.loading import load_tokenizer  # noqa: E402
from rlxf.models.tiny import build_tiny_model  # noqa: E402
from rlxf.roles.env_rollout import EnvRolloutRole  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402
from rlxf.rollout.torch_engine import TorchRolloutEngine  # noqa: E402


@ENVS.register("bench_fixed_observation")
class FixedObservationEnv:
    """An observation of ``obs`` token ids after every turn; never done (``max_turns`` ends it)."""

    def __init__(self, obs: int = 16):
        self.obs = obs

    def reset(self, task):
        return None

    def step(self, action):
        return [3 + (i % 90) for i in range(self.obs)], 0.0, False, {}


def build_model(name: str, vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "tiny":
        cfg = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=4)
    elif name == "smollm2":
        cfg = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=9,
                   num_key_value_heads=3, head_dim=64, rope_theta=100000.0)
    else:
        raise SystemExit(f"unknown model {name!r}: tiny | smollm2")
    config = transformers.LlamaConfig(vocab_size=vocab, max_position_embeddings=4096, rms_norm_eps=1e-5,
                                      tie_word_embeddings=True, pad_token_id=0, **cfg)
    return transformers.LlamaForCausalLM(config).eval()


def system(model, tokenizer, turns: int, args, keep: bool, barrier: bool, sessions: bool):
    engine = TorchRolloutEngine(model, [len(tokenizer) + 7], tokenizer.pad_token_id)  # no token ends a turn
    if not sessions:
        engine.open_turn_sessions = lambda *a, **k: None
    cfg = EnvConfig(name="bench_fixed_observation", kwargs={"obs": args.obs}, max_turns=turns,
                    max_total_tokens=turns * (args.new + args.obs), keep_kv_cache=keep,
                    turn_barrier=barrier, max_concurrent_steps=64)
    role = EnvRolloutRole(engine, tokenizer, False, 64, cfg)
    rows = [{"prompt": f"{i}+{2 * i}="} for i in range(args.rows)]
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.new)
    out = {"cpu_s": []}

    def run():
        start = time.process_time()  # this process's CPU time: less moved by other jobs on a shared machine
        batch = role.generate(rows, params, torch.Generator().manual_seed(0))
        out["cpu_s"].append(time.process_time() - start)
        out["tokens"] = int(batch.loss_mask.sum())
        out["prefilled"] = getattr(role.last_turns, "prefilled", None)

    return run, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="2,4,8,16")
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--obs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(str(build_tiny_model(Path(tmp) / "tiny")))
    results = []
    for model_name in args.models.split(","):
        model = build_model(model_name, len(tokenizer))
        for turns in (int(t) for t in args.turns.split(",")):
            systems = {
                "kept": system(model, tokenizer, turns, args, keep=True, barrier=False, sessions=True),
                "reprefill": system(model, tokenizer, turns, args, keep=False, barrier=False, sessions=True),
                "generate": system(model, tokenizer, turns, args, keep=True, barrier=True, sessions=False),
            }
            seconds = alternate({name: run for name, (run, _) in systems.items()}, args.reps)
            row = {"model": model_name, "turns": turns}
            for name, (_, out) in systems.items():
                step, cpu = median(seconds[name]), median(out["cpu_s"][1:])  # [0]: the warm-up
                row[name] = {"step_s": round(step, 4), "cpu_s": round(cpu, 4), "tokens_per_s": round(out["tokens"] / step, 1),
                             "tokens_per_cpu_s": round(out["tokens"] / cpu, 1), "prefilled": out["prefilled"]}
            for other in ("reprefill", "generate"):
                row[f"{other}_over_kept"] = round(row[other]["step_s"] / row["kept"]["step_s"], 2)
                row[f"{other}_over_kept_cpu"] = round(row[other]["cpu_s"] / row["kept"]["cpu_s"], 2)
            results.append(row)
            print(row, file=sys.stderr, flush=True)
    emit({"benchmark": "kv_cache_turns", "rows": args.rows, "new_tokens_per_turn": args.new,
          "observation_tokens": args.obs, "threads": args.threads, "reps": args.reps, "results": results})


if __name__ == "__main__":
    main()
