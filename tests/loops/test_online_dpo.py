"""Online DPO: pairs from the current policy labelled by the reward, trained with the DPO loss."""

from __future__ import annotations

import json

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from rlxf.loops.online_dpo import best_and_worst
from tests.conftest import small_overrides


def test_best_and_worst_by_hand():
    scores = [0.0, 1.0, 1.0, 0.5,   0.2, 0.2, 0.2, 0.2,   1.0, 0.0, 0.0, 0.3]
    chosen, rejected, tied = best_and_worst(scores, 4)
    assert chosen == [1, 8]  # first of the highest
    assert rejected == [0, 10]  # last of the lowest
    assert tied == 1


def test_online_dpo_labels_pairs_and_moves_the_policy(tmp_path, tiny_model_dir):
    overrides = small_overrides(tmp_path / "run", tiny_model_dir) + [
        "loop=online_dpo", "preference.steps=3", "preference.batch_size=8", "preference.micro_batch_size=4",
        "rollout.n_samples=4", "rollout.temperature=1.0", "eval.every=0", "sft.steps=80", "sft.optim.lr=3e-3",
    ]
    summary = get_loop("online_dpo")(load_config(None, overrides), write=lambda _: None)
    assert summary["steps"] == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("step", 0) > 0]
    assert len(steps) == 3
    for r in steps:
        assert r["train/pairs"] + r["train/tied_prompts"] == 8  # one pair or one tie per prompt
    assert steps[-1]["train/labelled_pairs"] == sum(r["train/pairs"] for r in steps) > 0
    trained = [r for r in steps if r["train/pairs"] > 0]
    assert all(r["train/grad_norm"] > 0 for r in trained)  # the DPO loss reaches the policy
    assert (tmp_path / "run" / "reference" / "config.json").exists()


def test_pair_log_probs_chosen_nll_is_the_token_mean(tiny_model, tokenizer):
    import torch

    from rlxf.data.preferences import pair_batch
    from rlxf.loops.dpo import pair_log_probs
    from rlxf.train.log_probs import sequence_log_probs

    rows = [{"prompt": "1+2=", "chosen": "3", "rejected": "4"}, {"prompt": "10+5=", "chosen": "15", "rejected": "1"}]
    batch = pair_batch(rows, tokenizer, False, 32)
    out = pair_log_probs(tiny_model, batch, length_normalised=False)
    log_probs, _ = sequence_log_probs(tiny_model, batch.prompt_ids, batch.prompt_mask, batch.response_ids,
                                      batch.response_mask)
    mask = batch.loss_mask.float()
    for i in range(2):  # chosen rows come first: the answer's characters and the end of sequence
        expected = -(log_probs[i] * mask[i]).sum() / mask[i].sum()
        assert mask[i].sum() == len(rows[i]["chosen"]) + 1
        torch.testing.assert_close(out.chosen_nll[i], expected)
        torch.testing.assert_close(out.chosen[i], (log_probs[i] * mask[i]).sum())


def test_dpo_loop_with_the_rpo_term(tmp_path, tiny_model_dir):
    overrides = small_overrides(tmp_path / "run", tiny_model_dir) + [
        "loop=dpo", "data.task=arithmetic_preferences", "preference.steps=2", "preference.batch_size=8",
        "preference.micro_batch_size=4", "preference.loss.nll_weight=1.0", "eval.every=0",
    ]
    get_loop("dpo")(load_config(None, overrides), write=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("step", 0) > 0]
    assert len(steps) == 2 and all(r["train/chosen_nll"] > 0 for r in steps)
    assert "eval/preference_loss" in steps[-1]


def test_online_dpo_recipe_loads():
    from pathlib import Path

    import rlxf

    config = load_config(Path(rlxf.__file__).parent / "recipes" / "online_dpo.yaml", [])
    assert config.loop == "online_dpo" and config.rollout.n_samples >= 2
