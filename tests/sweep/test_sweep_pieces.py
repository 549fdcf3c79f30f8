"""The pieces of a sweep that resumes and sizes itself to the memory: a seed's state on disk, a changed
config named, the memory estimate by hand, what ``--parallel`` may run, a stop signal forwarded to the seeds,
a report that tells unfinished seeds apart, and the refusals of ``--metric``, ``--seeds`` and ``--parallel``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rlxf.checked_config import load_config
from rlxf.cli import main
from rlxf.config import dump_config
from rlxf.config_error import ConfigError
from rlxf.sweep import command, memory
from rlxf.sweep.report import markdown_table, summarize
from rlxf.sweep.runs import ForwardedStop, SeedLaunch, SeedRun, read_seed, run_seeds
from rlxf.sweep.seed_state import FINISHED, NEW, PARTIAL, config_difference, seed_state

MB = 2**20


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlxf.cli", *args], capture_output=True, text=True, timeout=300)


def _one_rlxf_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("rlxf:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def test_a_seed_folder_is_new_partial_or_finished(tmp_path):
    run_dir = tmp_path / "seed_0"
    assert seed_state(run_dir) == NEW
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    assert seed_state(run_dir) == PARTIAL
    (run_dir / "summary.json").write_text(json.dumps({"steps": 3, "stopped_by": "SIGTERM"}))
    assert seed_state(run_dir) == PARTIAL  # a stopped run writes its summary too
    (run_dir / "summary.json").write_text('{"steps": 6, ')  # killed while writing it
    assert seed_state(run_dir) == PARTIAL
    (run_dir / "summary.json").write_text(json.dumps({"steps": 6}))
    assert seed_state(run_dir) == FINISHED


def test_config_difference_names_the_keys():
    saved = {"seed": 0, "train": {"steps": 3, "optim": {"lr": 1e-4}}, "data": {"task_args": {"digits": 3}}}
    assert config_difference(saved, json.loads(json.dumps(saved))) is None
    wanted = {"seed": 0, "train": {"steps": 4, "optim": {"lr": 1e-4}}, "data": {"task_args": {"digits": 3, "ops": "+"}}}
    assert config_difference(saved, wanted) == ("data.task_args.ops is '(absent)' on disk, '+' now; "
                                                "train.steps is 3 on disk, 4 now")
    many = {"seed": 1, "train": {"steps": 5, "optim": {"lr": 1.0}}, "data": {"task_args": {"digits": 2}}}
    assert config_difference(saved, many, most=2).endswith("(and 2 more keys)")


def _config(*overrides: str):
    return load_config(None, ["model.path=tiny:default", *overrides])


def test_the_memory_estimate_by_hand():
    shape = memory.ModelShape(parameters=1_000_000 * 1, vocab=1000, bytes_per_parameter=4)
    weights = 4e6 / MB
    grpo = memory.estimate_seed_mb(_config("train.micro_batch_size=8", "train.mini_batch_size=8",
                                           "data.max_prompt_tokens=94", "rollout.max_new_tokens=6"), shape)
    logits = 8 * 100 * 1000 * 4 * 3 / MB
    assert grpo.parts == {"base": memory.BASE_MB, "policy weights": round(weights),
                          "gradients + AdamW moments": round(3 * weights), "rollout engine's copy": round(weights),
                          "logits of a micro-batch": round(logits)}
    assert grpo.mb == round(memory.BASE_MB + 5 * weights + logits)
    # PPO: a critic with its gradients and AdamW moments; a KL penalty: a frozen reference
    ppo = memory.estimate_seed_mb(_config("algorithm.name=ppo", "algorithm.kl_coef=0.05"), shape)
    assert ppo.parts["critic (weights, gradients, AdamW)"] == round(4 * weights)
    assert ppo.parts["reference"] == round(weights)
    # LoRA: only the adapters train, and the reference is the adapter switched off
    lora_shape = memory.ModelShape(1_000_000, 1000, 4, lora_parameters=10_000)
    lora = memory.estimate_seed_mb(_config("algorithm.kl_coef=0.05", "model.lora.r=8"), lora_shape)
    assert lora.parts["gradients + AdamW moments"] == round(3 * 40_000 / MB) and "reference" not in lora.parts
    # logits in chunks: chunk x vocab, not micro-batch x tokens x vocab
    chunked = memory.estimate_seed_mb(_config("train.logits_chunk_tokens=50"), shape)
    assert chunked.parts["logits of a micro-batch"] == round(50 * 1000 * 12 / MB)


def test_the_shape_of_the_tiny_model(tiny_model_dir):
    shape = memory.model_shape(tiny_model_dir)
    from rlxf.models.loading import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    assert shape.vocab == model.config.vocab_size and shape.bytes_per_parameter == 4
    lora = load_config(None, ["model.lora.r=4"]).model.lora
    linear = [m for n, m in model.named_modules() if type(m).__name__ == "Linear" and not n.endswith("lm_head")]
    assert memory.model_shape(tiny_model_dir, lora=lora).lora_parameters == sum(
        4 * (m.in_features + m.out_features) for m in linear)


def test_a_finished_seeds_measured_peak_is_used(tmp_path):
    for name, summary in (("seed_0", {"peak_rss_mb": 900.4}), ("seed_1", {"peak_rss_mb": 1200.0}),
                          ("seed_2", {"peak_rss_mb": 5000.0, "stopped_by": "SIGTERM"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    peak = memory.measured_peak([tmp_path / f"seed_{s}" for s in range(4)])
    assert peak.mb == 1200 and peak.source == "measured: peak_rss_mb of seed_1"
    assert memory.measured_peak([tmp_path / "seed_3"]) is None


def test_auto_runs_fewer_seeds_when_a_seed_needs_more(monkeypatch):
    monkeypatch.setattr(memory, "default_parallel", lambda: 8)
    said = []
    assert command.choose_parallel(None, 3, memory.SeedMemory(500, "x"), 10_000, said.append) == 3
    # 10,000 MB available, 1,000 kept free: 9,000 // 4,000 = 2 seeds at once
    assert command.choose_parallel(None, 3, memory.SeedMemory(4000, "x"), 10_000, said.append) == 2
    assert command.choose_parallel(None, 3, memory.SeedMemory(20_000, "x"), 10_000, said.append) == 1
    assert "0 fit at once; running 1 at once (even one may not fit)" in said[-1]
    assert command.choose_parallel(2, 3, memory.SeedMemory(4000, "x"), 10_000, said.append) == 2
    with pytest.raises(ConfigError, match=r"--parallel 3: a seed needs about 4,000 MB \(x\); 10,000 MB is available, "
                                          r"1,000 MB kept free: 2 fit at once; use --parallel 2 or --parallel auto"):
        command.choose_parallel(3, 3, memory.SeedMemory(4000, "x"), 10_000, said.append)
    # more than the seeds left to run is not more at once
    assert command.choose_parallel(5, 2, memory.SeedMemory(4000, "x"), 10_000, said.append) == 2


def test_parallel_through_the_command_line(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """The available-memory query replaced at its boundary: what it says holds one tiny seed, not three."""
    need = memory.estimate_config_mb(load_config(None, [f"model.path={tiny_model_dir}"])).mb
    monkeypatch.setattr(memory, "available_mb", lambda: 512 + 1.5 * need)
    monkeypatch.setattr(memory, "default_parallel", lambda: 8)
    launched = []
    monkeypatch.setattr(command, "run_seeds", lambda launches, out, parallel, stop, ended: launched.append(parallel))
    args = ["sweep", f"model.path={tiny_model_dir}", "--seeds", "3", "--no-plot"]
    assert main([*args, "--parallel", "3", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlxf: --parallel 3: a seed needs about ") and "1 fit at once" in err and "\n" not in err
    assert not launched and not (tmp_path / "a").exists()
    assert main([*args, "--out", str(tmp_path / "b")]) == 1  # nothing ran: every seed is unfinished
    assert launched == [1]
    assert "1 fit at once; running 1 at once" in capsys.readouterr().out


def test_an_unknown_metric_and_no_seeds_are_refused_before_any_seed(tmp_path, capsys):
    proc = _cli("sweep", "--metric", "eval/acuracy", "--seeds", "2", "--out", str(tmp_path / "a"))
    line = _one_rlxf_line(proc)
    assert proc.returncode == 2 and "--metric eval/acuracy" in line and "eval/accuracy, eval/reward" in line
    proc = _cli("sweep", "--seeds", "0", "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and _one_rlxf_line(proc) == "rlxf: --seeds 0: give at least 1 seed"
    assert main(["sweep", "--seeds", "-2", "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == "rlxf: --seeds -2: give at least 1 seed\n"
    assert main(["sweep", "--parallel", "0", "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == "rlxf: --parallel 0: give a number of runs at once (1 or more) or auto\n"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_seed_that_ran_with_another_config_is_refused(tmp_path):
    out = tmp_path / "sweep"
    saved = load_config(None, ["train.steps=3", "seed=0", f"run_dir={out / 'seed_0'}", "threads=1",
                               "logging.progress_bar=false"])
    (out / "seed_0").mkdir(parents=True)
    (out / "seed_0" / "config.yaml").write_text(dump_config(saved))
    (out / "seed_0" / "summary.json").write_text(json.dumps({"steps": 3}))
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    proc = _cli("sweep", "train.steps=4", "--seeds", "2", "--out", str(out))
    assert proc.returncode == 2
    assert _one_rlxf_line(proc) == (f"rlxf: sweep: {out / 'seed_0'} ran with another config (train.steps is 3 on "
                                    "disk, 4 now): run the sweep with the settings it had, or give another --out")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing written, nothing moved


def test_the_plan_keeps_finished_seeds_and_resumes_cut_ones(tmp_path):
    out = tmp_path / "sweep"
    for seed, summary in ((0, {"steps": 3}), (1, None)):
        run_dir = out / f"seed_{seed}"
        run_dir.mkdir(parents=True)
        config = load_config(None, ["train.steps=3", f"seed={seed}", f"run_dir={run_dir}", "threads=1",
                                    "logging.progress_bar=false"])
        (run_dir / "config.yaml").write_text(dump_config(config))
        if summary:
            (run_dir / "summary.json").write_text(json.dumps(summary))
    plan = command.plan_sweep(command.SweepRequest(None, ["train.steps=3"], [0, 1, 2], "eval/accuracy", None, [], out))
    assert plan.kept == [0]
    assert [(launch.seed, launch.continues) for launch in plan.launches] == [(1, True), (2, False)]
    assert plan.launches[0].command[-2:] == ["--resume", str(out / "seed_1")]
    assert plan.launches[1].command[-4:] == ["seed=2", f"run_dir={out / 'seed_2'}", "threads=1",
                                             "logging.progress_bar=false"]


def test_the_report_tells_unfinished_seeds_apart(tmp_path):
    runs = [SeedRun(0, tmp_path / "seed_0", None, 5.0, [(0, 0.2), (4, 0.5)], FINISHED),
            SeedRun(1, tmp_path / "seed_1", 143, 2.0, [(0, 0.3), (2, 0.4)], PARTIAL, checkpoint_step=3),
            SeedRun(2, tmp_path / "seed_2", 1, 1.0, [], "failed"),
            SeedRun(3, tmp_path / "seed_3", None, 0.0, [], NEW)]
    summary = summarize(runs, "eval/accuracy")
    assert [row["seed"] for row in summary["per_seed"]] == [0] and summary["complete"] is False
    assert summary["partial"] == [{"seed": 1, "checkpoint_step": 3, "curve": [(0, 0.3), (2, 0.4)]}]
    assert [f["seed"] for f in summary["failed"]] == [2] and summary["not_started"] == [3]
    assert summary["every_seed_improved"] is False  # seed 0 improved, but the sweep is not done
    table = markdown_table(summary)
    assert ("seed 1 not finished (last checkpoint at step 3; eval/accuracy 0.400 at step 2): the same rlxf sweep "
            "continues it") in table
    assert "seed 2 failed (exit 1)" in table and "not started yet: seed 3" in table


def test_a_seed_read_from_disk(tmp_path):
    run_dir = tmp_path / "seed_0"
    (run_dir / "checkpoints" / "step_000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_000004.tmp").mkdir()  # being written when the run was cut: not whole
    (run_dir / "config.yaml").write_text("seed: 0\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "eval/accuracy": s / 10}) + "\n"
                                                   for s in (0, 2, 4)))
    seed = read_seed(run_dir, 0, "eval/accuracy")
    assert seed.state == PARTIAL and seed.checkpoint_step == 2 and seed.curve == [(0, 0.0), (2, 0.2), (4, 0.4)]
    assert read_seed(run_dir, 0, "eval/accuracy", returncode=143).state == PARTIAL  # stopped by SIGTERM
    assert read_seed(run_dir, 0, "eval/accuracy", returncode=1).state == "failed"


CHILD = ("import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
         "open(sys.argv[1], 'w').close()\n"
         "time.sleep(60)\n")


def test_a_stop_signal_is_forwarded_and_no_new_seed_starts(tmp_path):
    launches = [SeedLaunch(s, tmp_path / f"seed_{s}", [sys.executable, "-c", CHILD, str(tmp_path / f"up_{s}")], False)
                for s in range(3)]

    def signal_when_both_run():
        deadline = time.time() + 60
        while not ((tmp_path / "up_0").exists() and (tmp_path / "up_1").exists()) and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # to the sweep's process only, as a scheduler does

    ended = []
    stop = ForwardedStop().install()
    try:
        threading.Thread(target=signal_when_both_run, daemon=True).start()
        codes = run_seeds(launches, tmp_path, 2, stop, lambda seed, rc: ended.append(seed), poll_seconds=0.02)
    finally:
        stop.restore()
    assert stop.requested == signal.SIGTERM
    assert codes == {0: 143, 1: 143} and sorted(ended) == [0, 1]  # each seed got it and stopped
    assert not (tmp_path / "up_2").exists() and not (tmp_path / "seed_2.log").exists()  # never started
    assert signal.getsignal(signal.SIGTERM) is not stop._on_signal
