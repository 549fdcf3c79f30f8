"""On-policy distillation through the command line: the raw tiny model (the student) samples, the tiny model
after SFT (the teacher, same tokenizer) scores every sampled token, and the student's reverse KL to the
teacher falls; the teacher role's log-probs are those of a plain forward pass of the teacher."""

from __future__ import annotations

import json

import pytest
import torch

from rlxf.cli import main
from rlxf.models.loading import load_causal_lm
from tests.conftest import small_overrides

# 20 steps at lr 1e-2 from the raw model: reverse KL ~4.7 over the first 5 steps, ~2.0 over the last 5
# (seeds 0, 1, 2); about 5 s on one thread.
STEPS = 20
DISTILL = ["sft.steps=0", "checkpoint.every=0", "train.optim.lr=1e-2",
           "algorithm.advantage_estimator=on_policy_distillation"]


def plain_forward_log_probs(model: torch.nn.Module, batch) -> torch.Tensor:
    """[B, R] log p(response token) from one full forward pass over prompt + response (temperature 1)."""
    ids, attention = batch.input_ids, batch.attention_mask
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits.float()
    width, prompt = batch.response_ids.shape[1], batch.prompt_ids.shape[1]
    predicting = torch.log_softmax(logits[:, prompt - 1:prompt - 1 + width], dim=-1)
    return predicting.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)


def test_student_reverse_kl_to_the_teacher_falls(tmp_path, tiny_model_dir, sft_model_dir, trained_batches):
    run_dir = tmp_path / "distill"
    code = main(["train", *small_overrides(run_dir, tiny_model_dir, steps=STEPS), *DISTILL,
                 f"model.teacher_path={sft_model_dir}"])
    assert code == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kl = [row["distill/reverse_kl"] for row in rows if "distill/reverse_kl" in row]
    assert len(kl) == STEPS
    first, last = sum(kl[:5]) / 5, sum(kl[-5:]) / 5
    assert first > 3.0 and last < 0.6 * first, kl

    batch = trained_batches[0]
    mask = batch.loss_mask.bool()
    direct = plain_forward_log_probs(load_causal_lm(sft_model_dir), batch)
    torch.testing.assert_close(batch.teacher_log_probs[mask], direct[mask], atol=1e-5, rtol=1e-5)
    # the metric is the mean over loss tokens of student (sampler) minus teacher log-probs
    assert kl[0] == pytest.approx(float((batch.rollout_log_probs - direct)[mask].mean()), abs=1e-4)


def test_the_estimator_without_a_teacher_is_one_line_naming_both_keys(tmp_path, tiny_model_dir, capsys):
    code = main(["train", *small_overrides(tmp_path / "run", tiny_model_dir), *DISTILL])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("rlxf: "), err
    assert "algorithm.advantage_estimator=on_policy_distillation" in err[0] and "model.teacher_path" in err[0]


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path, tiny_model_dir, capsys):
    from transformers import AutoTokenizer

    other = tmp_path / "other"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_tokens(["<not-in-the-policy>"])
    tokenizer.save_pretrained(other)
    load_causal_lm(tiny_model_dir).save_pretrained(other)
    code = main(["train", *small_overrides(tmp_path / "run", tiny_model_dir), *DISTILL, f"model.teacher_path={other}"])
    err = capsys.readouterr().err
    assert code == 2 and "model.teacher_path" in err and "tokenizer" in err, err


def test_a_teacher_in_a_process_of_its_own_gives_the_same_run(tmp_path, tiny_model_dir, sft_model_dir):
    """Role ``teacher`` placed like the reference: in a child process (runtime.kind=process) the run is the
    in-process run, number for number."""
    curves = {}
    for name, placement in (("embedded", ["runtime.kind=embedded"]),
                            ("process", ["runtime.kind=process", "runtime.process_roles=[teacher]"])):
        run_dir = tmp_path / name
        assert main(["train", *small_overrides(run_dir, tiny_model_dir, steps=3), *DISTILL,
                     f"model.teacher_path={sft_model_dir}", *placement]) == 0
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        curves[name] = [row["distill/reverse_kl"] for row in rows if "distill/reverse_kl" in row]
    assert len(curves["process"]) == 3 and curves["process"][0] > 3.0
    assert curves["process"] == curves["embedded"]


def test_the_warm_up_can_imitate_the_teachers_greedy_answers(tmp_path, tiny_model_dir, sft_model_dir, monkeypatch):
    """``sft.targets=teacher``: the SFT stage trains on the teacher's greedy answers to its prompts, each the
    continuation plain transformers generates greedily, cut at the stop token."""
    from rlxf.loops import rl_session

    seen = {}

    def capture(policy, tokenizer, rows, cfg, *args, **kwargs):
        seen["rows"], seen["tokenizer"] = rows, tokenizer
        return [0.0]

    monkeypatch.setattr(rl_session, "run_sft", capture)
    code = main(["train", *small_overrides(tmp_path / "run", tiny_model_dir, steps=1), "sft.steps=3", "sft.batch_size=4",
                 "sft.targets=teacher", f"model.teacher_path={sft_model_dir}", "rollout.max_new_tokens=10"])
    assert code == 0
    rows, tokenizer = seen["rows"], seen["tokenizer"]
    assert len(rows) == 3 * 4  # the prompts the stage consumes, once each
    teacher = load_causal_lm(sft_model_dir)
    for row in rows:
        ids = tokenizer(row["prompt"], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = teacher.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        answer = out[0, ids.shape[1]:].tolist()
        if tokenizer.eos_token_id in answer:
            answer = answer[:answer.index(tokenizer.eos_token_id)]
        assert row["sft_target"] == tokenizer.decode(answer, skip_special_tokens=True)
    assert any(row["sft_target"] for row in rows)


@pytest.mark.parametrize("extra,says", [
    ([], "sft.targets=teacher imitates the teacher's answers: set model.teacher_path"),
    (["loop=sft", "model.teacher_path=x"], "warm-up of loop rl / rl_async on a one-turn task (here loop sft)"),
])
def test_teacher_targets_without_a_teacher_or_outside_rl_are_one_line(tmp_path, tiny_model_dir, capsys, extra, says):
    code = main(["train", *small_overrides(tmp_path / "run", tiny_model_dir), "sft.targets=teacher", *extra])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and says in err[0], err
