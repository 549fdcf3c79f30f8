"""An RL step of rlxf vs TRL's ``GRPOTrainer``: same model, prompts, reward and settings, one process.

    .venv/bin/python benchmarks/rl_step_vs_trl.py [--steps 20] [--threads 1] [--mode both]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: trl, accelerate, datasets); rlxf itself
never imports trl. Both systems run GRPO on the CPU (no vLLM, beta 0, one optimizer step per
generation batch): ``--prompts`` prompts x ``--n`` samples (64 completions), ``--new`` completion
tokens, the same learning rate, the same prompt sequence and the rlxf arithmetic reward (wrapped for
TRL). Their steps alternate in one process (an rlxf step runs inside TRL's ``on_step_end`` callback)
so background load hits both alike; times are medians after ``--warmup`` steps.

Two modes:

* ``trained``: the default recipe's tiny model after a short SFT (cached under ``~/.cache/rlxf/bench``, models/cache_dir.py): it
  answers in a few tokens and stops, so most rows end early. Reward and held-out accuracy (greedy,
  rlxf's evaluator for both models) are compared after the same number of samples.
* ``full``: the untrained tiny model with end-of-sequence disabled on both sides, so every completion
  is exactly ``--new`` tokens (the issue's "64 completions x 16 tokens" configuration).

Each mode also prints the step's FLOP floor: (2 x params x generated tokens + 6 x params x trained
tokens + 2 x params x tokens of any extra log-prob pass) / the fp32 matmul FLOP/s measured in this
process between steps, and the engine-vs-HF-generate throughput on the same batch (fp32, and bf16
against HF on a bf16 copy) with the fp32 ceiling of any engine: matmul FLOP/s / (2 x params).
``--bf16`` adds a second pair in bf16: TRL with ``bf16=True`` against rlxf with bf16 autocast and
bf16 rollouts (``rollout.engine_options.dtype``, token TIS). Peak resident memory comes from one
short subprocess per system (``--only rlxf|trl``), so neither is charged for the other's imports.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.algos import compute_advantages, token_rewards_from_scores  # noqa: E402
from rlxf.config import Config  # noqa: E402
from rlxf.data.arithmetic import arithmetic_task  # noqa: E402
from rlxf.data.prompt_tokens import encode_prompts, render_prompt  # noqa: E402
from rlxf.data.prompts import PromptStream  # noqa: E402
from rlxf.eval.accuracy import evaluate  # noqa: E402
from rlxf.models.cache_dir import user_cache_dir  # noqa: E402
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from rlxf.rewards.arithmetic import AnswerReward  # noqa: E402
from rlxf.rewards.math_answer import MathAnswerReward  # noqa: E402
from rlxf.roles.actor import ActorRole  # noqa: E402
from rlxf.roles.reward import RewardRole  # noqa: E402
from rlxf.roles.rollout import RolloutRole  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402
from rlxf.train.log_probs import distinct_prompts  # noqa: E402

NO_EOS = -1  # an id no token has: the engine never stops a row


def task_splits():
    # The default recipe's task: a number below 1000 plus a digit.
    return arithmetic_task(seed=0, eval_size=200, digits=3, b_digits=1, ops="+", sloppy_teacher=0.7)


def sums_in_words_splits():
    # recipes/smollm2_grpo.yaml's task: two-digit plus one-digit sums asked in words, 100 held out
    return arithmetic_task(seed=0, eval_size=100, digits=2, b_digits=1, ops="+", question="What is {a} {op_word} {b}?")


@dataclass(frozen=True)
class Mode:
    """What one comparison runs: the model, the task, its reward and the recipe's settings (the
    command line's --prompts/--n/--new/--lr/--micro override the last five)."""

    label: str
    model_path: Callable[[argparse.Namespace], str]
    splits: Callable[[], object]
    reward: Callable[[], object]
    reward_name: str
    chat_template: bool
    stops_at_eos: bool
    temperature: float
    prompts: int
    n: int
    new: int
    lr: float
    micro: int | None = None  # rows per forward/backward (None: the whole batch at once)
    eval_new_tokens: int = 8  # greedy held-out answers


MODES = {
    "trained": Mode("tiny-sft", lambda args: sft_model_path(args.sft_steps), task_splits, AnswerReward,
                    "arithmetic", False, True, 1.0, 8, 8, 16, 1e-4),
    "full": Mode("tiny (untrained, EOS disabled)", lambda args: resolve_model_path("tiny:default"), task_splits,
                 AnswerReward, "arithmetic", False, False, 1.0, 8, 8, 16, 1e-4),
    # recipes/smollm2_grpo.yaml: 4 prompts x 8 samples through the chat template, 40 new tokens, T 0.7,
    # lr 1e-5, micro-batches of 8 (TRL: per-device batch 8, gradient accumulation 4)
    "smollm2": Mode("SmolLM2-135M-Instruct (Q4_1 GGUF dequantized)",
                    lambda args: resolve_model_path("smollm2:135m-instruct"), sums_in_words_splits,
                    MathAnswerReward, "math", True, True, 0.7, 4, 8, 40, 1e-5, micro=8, eval_new_tokens=40),
}


def settings(mode: Mode, args) -> argparse.Namespace:
    """args with the mode's recipe settings wherever the command line left them unset."""
    out = copy.copy(args)
    for key in ("prompts", "n", "new", "lr", "micro"):
        if getattr(out, key) is None:
            setattr(out, key, getattr(mode, key))
    out.micro = out.micro or out.prompts * out.n
    out.temperature = mode.temperature
    return out


def sft_model_path(steps: int) -> str:
    """The default recipe's SFT stage applied to the tiny model once; later runs reuse it."""
    out = user_cache_dir() / "bench" / f"tiny-sft-{steps}"
    if (out / "config.json").exists():
        return str(out)
    from rlxf.loops.sft import run_sft

    base = resolve_model_path("tiny:default")
    tokenizer, model = load_tokenizer(base), load_causal_lm(base)
    cfg = Config.model_validate({"sft": {"steps": steps, "batch_size": 64, "optim": {"lr": 1e-3}}})
    torch.manual_seed(0)
    run_sft(model, tokenizer, task_splits().train, cfg.sft, 0, False, 256)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def matmul_flops(size: int = 1024, reps: int = 8) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return reps * 2 * size**3 / (time.perf_counter() - start)


def peak_rss_mb() -> float:
    # VmHWM: this process image's peak (ru_maxrss would carry the parent's peak over fork + exec).
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RlxfGRPO:
    """rlxf's synchronous GRPO step (the stages of ``loops/rl.py``), built from its roles."""

    def __init__(self, model_path: str, args, eos_id: int, rows: list[dict], mode: Mode, bf16: bool = False) -> None:
        self.tokenizer = load_tokenizer(model_path)
        torch.manual_seed(args.seed)
        self.model = load_causal_lm(model_path)
        # bf16: autocast training and bf16 rollouts of the fp32 weights, their log-prob mismatch
        # corrected by token-level TIS (the recipe GPU stacks run with a bf16 inference engine)
        cfg = Config.model_validate({
            "threads": args.threads,
            "rollout": {"n_samples": args.n, "max_new_tokens": args.new,
                        "engine_options": {"dtype": "bfloat16"} if bf16 else {}},
            "algorithm": {"tis_level": "token"} if bf16 else {},
            "train": {"prompts_per_step": args.prompts, "mini_batch_size": args.prompts * args.n,
                      "micro_batch_size": args.micro,
                      "optim": {"lr": args.lr, "grad_clip": 1.0, "autocast": "bfloat16" if bf16 else "none"}},
        })
        self.algo = cfg.algorithm
        self.params = SamplingParams(n=args.n, temperature=args.temperature, max_new_tokens=args.new)
        engine = build_engine("torch", self.model, eos_id, self.tokenizer.pad_token_id, cfg.rollout.engine_options)
        self.rollout = RolloutRole(engine, self.tokenizer, mode.chat_template, 256)
        self.reward = RewardRole(mode.reward(), mode.reward_name)
        self.actor = ActorRole(self.model, cfg.train.optim, self.algo, args.prompts * args.n, args.micro,
                               args.temperature)
        self.stream = PromptStream(rows, seed=0)
        self.prompts = args.prompts
        self.sample_gen = torch.Generator().manual_seed(args.seed)
        self.shuffle_gen = torch.Generator().manual_seed(args.seed + 1)
        self.version = 0
        self.records: list[dict] = []

    def step(self) -> dict:
        times = {}
        start = time.perf_counter()
        batch = self.rollout.generate(self.stream.take(self.prompts), self.params, self.sample_gen)
        times["generation"] = time.perf_counter() - start
        mark = time.perf_counter()
        metrics = self.reward.score_batch(
            batch, self.rollout.decode_prompts(batch), self.rollout.decode_responses(batch)
        )
        mask = batch.loss_mask
        batch.token_rewards = token_rewards_from_scores(batch.rewards, mask)
        batch.advantages, batch.returns = compute_advantages(
            self.algo, batch.token_rewards, mask, batch.group_ids
        )
        times["reward_and_advantages"] = time.perf_counter() - mark
        mark = time.perf_counter()
        self.actor.update(batch, self.shuffle_gen)
        times["train"] = time.perf_counter() - mark
        mark = time.perf_counter()
        self.version += 1
        self.rollout.update_weights(self.actor.state_dict(), self.version)
        times["weight_sync"] = time.perf_counter() - mark
        record = {
            "seconds": time.perf_counter() - start,
            "stages": times,
            "generated_tokens": int(batch.response_mask.sum()),
            "trained_tokens": int(batch.prompt_mask.sum() + batch.response_mask.sum()),
            # what the shared-prompt forward computes: each distinct prompt once, plus every response
            "computed_trained_tokens": int(batch.prompt_mask[distinct_prompts(
                batch.prompt_ids, batch.prompt_mask, batch.prompt_ids.shape[1])[0]].sum() + batch.response_mask.sum()),
            "extra_log_prob_tokens": 0,  # on-policy: the rollout's log-probs are the old ones
            "reward": metrics["reward/mean"],
        }
        self.records.append(record)
        return record


class TrlGRPO:
    """TRL's ``GRPOTrainer`` with the same settings; ``run(callback)`` trains all steps."""

    def __init__(self, model_path: str, args, eos_suppressed: bool, rows: list[dict], out_dir: str, mode: Mode,
                 bf16: bool = False) -> None:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        self.tokenizer = load_tokenizer(model_path)
        torch.manual_seed(args.seed)
        self.model = load_causal_lm(model_path)
        scorer = mode.reward()
        eos = self.tokenizer.eos_token_id
        self.step_tokens: list[tuple[int, int]] = []
        self.rewards: list[float] = []
        # TRL gets the prompt text rlxf's rollout encodes (the chat template rendered where the mode uses it)
        texts = [render_prompt(r, self.tokenizer, mode.chat_template) for r in rows]
        prompt_len = {t: len(ids) for t, ids in zip(texts, encode_prompts(rows, self.tokenizer, mode.chat_template, 256))}

        def arithmetic_reward(prompts, completions, completion_ids, answer, **_):
            stopped = [bool(ids) and ids[-1] == eos for ids in completion_ids]
            meta = [{"answer": a, "stopped": s} for a, s in zip(answer, stopped)]
            scores = scorer.score(prompts, completions, meta).scores
            generated = sum(len(ids) for ids in completion_ids)
            self.step_tokens.append((generated, generated + sum(prompt_len[p] for p in prompts)))
            self.rewards.append(sum(scores) / len(scores))
            return scores

        config = GRPOConfig(
            output_dir=out_dir, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True,
            logging_steps=10**6, seed=args.seed, data_seed=args.seed, shuffle_dataset=False,
            per_device_train_batch_size=args.micro, gradient_accumulation_steps=args.prompts * args.n // args.micro,
            num_generations=args.n, max_completion_length=args.new, temperature=args.temperature, top_k=0, top_p=1.0,
            learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0, beta=0.0, num_iterations=1, loss_type="grpo", scale_rewards="group",
            max_steps=args.warmup + args.steps, bf16=bf16, dataloader_num_workers=0,
            generation_kwargs={"suppress_tokens": [eos]} if eos_suppressed else None,
        )
        dataset = Dataset.from_list([{"prompt": t, "answer": r["answer"]} for t, r in zip(texts, rows)])
        self.trainer = GRPOTrainer(
            model=self.model, reward_funcs=arithmetic_reward, args=config, train_dataset=dataset,
            processing_class=self.tokenizer,
        )
        self.callback_base = TrainerCallback

    def run(self, between_steps) -> list[float]:
        """Train; ``between_steps()`` runs after each TRL step. Returns TRL's step seconds."""
        seconds: list[float] = []

        class Timer(self.callback_base):
            def on_step_begin(self, *_, **__):
                self.start = time.perf_counter()

            def on_step_end(self, *_, **__):
                seconds.append(time.perf_counter() - self.start)
                between_steps()

        self.trainer.add_callback(Timer())
        self.trainer.train()
        return seconds


def hf_generate_vs_engine(model, tokenizer, prompts: list[list[int]], args, reps: int) -> dict:
    """Tokens/s of rlxf's engine vs plain HF ``generate`` (KV cache, sampling at temperature 1,
    EOS disabled so both produce exactly prompts x n x new tokens), interleaved."""
    from rlxf.batch import left_pad

    engine = build_engine("torch", model, NO_EOS, tokenizer.pad_token_id)
    params = SamplingParams(n=args.n, temperature=args.temperature, max_new_tokens=args.new)
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)

    # The same pair in bf16: the engine's dtype option against HF generate on a bf16 copy of the model.
    engine_bf16 = build_engine("torch", model, NO_EOS, tokenizer.pad_token_id, {"dtype": "bfloat16"})
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)

    def ours(engine):
        return lambda: engine.generate(prompts, params, gen)

    def hf(model):
        @torch.inference_mode()
        def run():
            model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                num_return_sequences=args.n, do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0,
                pad_token_id=tokenizer.pad_token_id, use_cache=True,
            )
        return run

    candidates = (("rlxf_engine", ours(engine)), ("hf_generate", hf(model)),
                  ("rlxf_engine_bf16", ours(engine_bf16)), ("hf_generate_bf16", hf(model_bf16)))
    seconds = {name: [] for name, _ in candidates}
    for _, fn in candidates:
        fn()
    for _ in range(reps):
        for name, fn in candidates:
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    tokens = len(prompts) * args.n * args.new
    speed = {name: tokens / statistics.median(s) for name, s in seconds.items()}
    return {
        "tokens": tokens,
        "tokens_per_s": {k: round(v) for k, v in speed.items()},
        "rlxf_vs_hf_generate": round(speed["rlxf_engine"] / speed["hf_generate"], 2),
        "bf16_rlxf_vs_bf16_hf_generate": round(speed["rlxf_engine_bf16"] / speed["hf_generate_bf16"], 2),
        "bf16_rlxf_vs_fp32_hf_generate": round(speed["rlxf_engine_bf16"] / speed["hf_generate"], 2),
    }


def run_mode(name: str, args) -> dict:
    mode = MODES[name]
    args = settings(mode, args)
    splits = mode.splits()
    model_path = mode.model_path(args)
    total = args.warmup + args.steps
    # One prompt sequence for both: rlxf's seeded stream order, fed to TRL unshuffled.
    rows = PromptStream(splits.train, seed=0).take(total * args.prompts)
    tokenizer = load_tokenizer(model_path)
    eos_id = tokenizer.eos_token_id if mode.stops_at_eos else NO_EOS
    matmul: list[float] = []

    def run_pair(bf16: bool) -> tuple[RlxfGRPO, TrlGRPO, list[float]]:
        """rlxf and TRL in the same precision, their steps alternating."""
        rlxf = RlxfGRPO(model_path, args, eos_id, rows, mode, bf16=bf16)
        with tempfile.TemporaryDirectory() as out_dir:
            trl = TrlGRPO(model_path, args, eos_suppressed=not mode.stops_at_eos, rows=rows, out_dir=out_dir,
                          mode=mode, bf16=bf16)

            def between_steps():
                rlxf.step()
                matmul.append(matmul_flops(1024))

            return rlxf, trl, trl.run(between_steps)

    rlxf, trl, trl_seconds = run_pair(bf16=False)
    pair_bf16 = run_pair(bf16=True) if args.bf16 else None
    params = sum(p.numel() for p in rlxf.model.parameters())
    matmul += [matmul_flops(2048, reps=2) for _ in range(2)]
    flops = statistics.median(matmul)

    def summary(seconds, gen_tokens, trained_tokens, extra_tokens, rewards, train_seconds=None, computed=None):
        s = statistics.median(seconds[args.warmup:])
        g = statistics.median(gen_tokens[args.warmup:])
        t = statistics.median(trained_tokens[args.warmup:])
        floor_flop = 2 * params * g + 6 * params * t + 2 * params * extra_tokens
        out = {
            "seconds_per_step": round(s, 4),
            "generated_tokens_per_step": g,
            "trained_tokens_per_step": t,
            "generated_tokens_per_s": round(g / s),
            "trained_tokens_per_s": round(t / s),
            "floor_seconds": round(floor_flop / flops, 4),
            "step_vs_floor": round(s / (floor_flop / flops), 2),
            "reward_first_steps": round(statistics.mean(rewards[: max(1, args.steps // 4)]), 4),
            "reward_last_steps": round(statistics.mean(rewards[-max(1, args.steps // 4):]), 4),
        }
        if train_seconds is not None:
            ts = statistics.median(train_seconds[args.warmup:])
            out["train_pass_seconds"] = round(ts, 4)
            out["train_pass_flops_per_s"] = round(6 * params * t / ts / 1e9, 1)
            out["train_pass_vs_matmul"] = round(6 * params * t / ts / flops, 3)
            c = statistics.median(computed[args.warmup:])
            out["computed_trained_tokens_per_step"] = c
            out["train_pass_vs_matmul_computed_tokens"] = round(6 * params * c / ts / flops, 3)
        return out

    def rlxf_summary(system: RlxfGRPO) -> dict:
        rec = system.records
        out = summary(
            [r["seconds"] for r in rec], [r["generated_tokens"] for r in rec], [r["trained_tokens"] for r in rec],
            0, [r["reward"] for r in rec], [r["stages"]["train"] for r in rec],
            [r["computed_trained_tokens"] for r in rec],
        )
        out["stage_seconds"] = {
            k: round(statistics.median(r["stages"][k] for r in rec[args.warmup:]), 4) for k in rec[0]["stages"]
        }
        return out

    def trl_summary(system: TrlGRPO, seconds: list[float]) -> dict:
        return summary(seconds, [g for g, _ in system.step_tokens], [t for _, t in system.step_tokens], 0,
                       system.rewards)

    rlxf_out, trl_out = rlxf_summary(rlxf), trl_summary(trl, trl_seconds)
    eval_rows = splits.eval
    reward_role = RewardRole(mode.reward(), mode.reward_name)
    evaluated = [(rlxf_out, rlxf.model), (trl_out, trl.model)]
    extra, bf16_ratios = {}, {}
    if pair_bf16 is not None:
        # floors and FLOP/s ratios of this pair are still against the fp32 matmul rate
        extra["rlxf_bf16"], extra["trl_bf16"] = rlxf_summary(pair_bf16[0]), trl_summary(pair_bf16[1], pair_bf16[2])
        evaluated += [(extra["rlxf_bf16"], pair_bf16[0].model), (extra["trl_bf16"], pair_bf16[1].model)]
        bf16_ratios = {
            "bf16_rlxf_speedup_vs_bf16_trl": round(
                extra["trl_bf16"]["seconds_per_step"] / extra["rlxf_bf16"]["seconds_per_step"], 2),
            "bf16_rlxf_speedup_vs_fp32_trl": round(
                trl_out["seconds_per_step"] / extra["rlxf_bf16"]["seconds_per_step"], 2),
        }
    for out, model in evaluated:
        model.eval()
        engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
        role = RolloutRole(engine, tokenizer, mode.chat_template, 256)
        out["held_out_accuracy"] = evaluate(role, reward_role, eval_rows, 256, mode.eval_new_tokens)["eval/accuracy"]
    prompts = encode_prompts(rows[: args.prompts], tokenizer, mode.chat_template, 256)
    generation = hf_generate_vs_engine(rlxf.model, tokenizer, prompts, args, reps=args.gen_reps)
    # What no fp32 engine can beat here: every generated token costs at least 2 x params FLOPs of matmul
    ceiling = flops / (2 * params)
    generation["fp32_ceiling_tokens_per_s"] = round(ceiling)
    generation["fp32_ceiling_vs_hf_generate"] = round(ceiling / generation["tokens_per_s"]["hf_generate"], 2)
    return {
        "model": mode.label,
        "settings": {k: getattr(args, k) for k in ("prompts", "n", "new", "lr", "micro", "temperature")},
        "samples_per_system": total * args.prompts * args.n,
        "matmul_fp32_gflops": round(flops / 1e9, 1),
        "rlxf": rlxf_out,
        "trl": trl_out,
        **extra,
        "generation": generation,
        "ratios": {
            "rlxf_speedup_vs_trl": round(trl_out["seconds_per_step"] / rlxf_out["seconds_per_step"], 2),
            "rlxf_step_vs_floor": rlxf_out["step_vs_floor"],
            "engine_vs_hf_generate": generation["rlxf_vs_hf_generate"],
            "train_pass_vs_matmul": rlxf_out["train_pass_vs_matmul"],
            "train_pass_vs_matmul_computed_tokens": rlxf_out["train_pass_vs_matmul_computed_tokens"],
            **bf16_ratios,
        },
    }


def only(system: str, name: str, args) -> None:
    """A short run of one system in a fresh process: its peak resident memory."""
    mode = MODES[name]
    args = settings(mode, args)
    model_path = mode.model_path(args)
    rows = PromptStream(mode.splits().train, seed=0).take((args.warmup + args.steps) * args.prompts)
    eos_id = load_tokenizer(model_path).eos_token_id if mode.stops_at_eos else NO_EOS
    if system == "rlxf":
        runner = RlxfGRPO(model_path, args, eos_id, rows, mode)
        for _ in range(args.warmup + args.steps):
            runner.step()
    else:
        with tempfile.TemporaryDirectory() as out_dir:
            TrlGRPO(model_path, args, not mode.stops_at_eos, rows, out_dir, mode).run(lambda: None)
    print(json.dumps({"peak_rss_mb": round(peak_rss_mb(), 1)}))


def memory(name: str, args) -> dict:
    """Peak RSS of each system over a 3-step run of mode ``name`` in its own process (fp32)."""
    out = {}
    passed = [f"--{key}={value}" for key in ("prompts", "n", "new", "lr", "micro")
              if (value := getattr(args, key)) is not None]
    for system in ("rlxf", "trl"):
        cmd = [sys.executable, __file__, "--only", system, "--mode", name, "--steps", "3", "--warmup", "1",
               "--threads", str(args.threads), "--sft-steps", str(args.sft_steps), *passed]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[system] = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both",
                        help="both: trained and full (the tiny model); smollm2: recipes/smollm2_grpo.yaml's settings")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per system (after warm-up)")
    parser.add_argument("--warmup", type=int, default=2)
    # unset: the mode's own (tiny: 8 x 8, 16 new tokens, lr 1e-4; smollm2: the recipe's 4 x 8, 40, 1e-5)
    parser.add_argument("--prompts", type=int)
    parser.add_argument("--n", type=int)
    parser.add_argument("--new", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--micro", type=int, help="rows per forward/backward (TRL: per-device batch)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both systems (0: torch's default)")
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--gen-reps", type=int, default=7)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--bf16", action="store_true",
                        help="also run a bf16 pair: TRL bf16=True vs rlxf autocast + bf16 rollouts (TIS)")
    parser.add_argument("--only", choices=["rlxf", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    modes = ["trained", "full"] if args.mode == "both" else [args.mode]
    if args.only:
        only(args.only, modes[0], args)
        return
    result = {"benchmark": "rl_step_vs_trl", "threads": torch.get_num_threads(),
              "config": {"timed_steps": args.steps, "warmup": args.warmup}}
    for mode in modes:
        result[mode] = run_mode(mode, args)
    if not args.no_memory:
        # trained and full share the tiny model: its peak is measured once, on the trained run
        measured = dict.fromkeys("trained" if mode == "full" else mode for mode in modes)
        result["memory"] = {mode: {"peak_rss_mb": memory(mode, args)} for mode in measured}
    emit(result)


if __name__ == "__main__":
    main()
