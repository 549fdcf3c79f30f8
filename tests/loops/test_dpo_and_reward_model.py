"""The DPO loss on a tiny model against a hand computation, and the reward model's head and pair accuracy."""

import torch
import torch.nn.functional as F

from rlxf.algos import PreferenceLossConfig
from rlxf.checked_config import load_config
from rlxf.loops.dpo import PairScorer, pair_loss_share
from rlxf.loops.reward_model import pair_scores, reward_model_batch
from rlxf.models.reward_model import reward_model_from_lm, sequence_rewards

ROWS = [
    {"prompt": "12+3=", "chosen": "15", "rejected": "1", "ref_chosen": -7.0, "ref_rejected": -9.5},
    {"prompt": "1+1=", "chosen": "2", "rejected": "11", "ref_chosen": -4.0, "ref_rejected": -3.0},
]


def hand_sequence_log_prob(model, tokenizer, prompt, response):
    """log p(response + EOS | prompt), token by token, from unpadded logits."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt_ids + response_ids])
    log_probs = model(ids).logits[0].log_softmax(-1)
    return sum(float(log_probs[len(prompt_ids) + t - 1, tok]) for t, tok in enumerate(response_ids))


def test_dpo_loss_matches_a_hand_computation(tiny_model, tokenizer):
    config = load_config(None, ["loop=dpo", "preference.loss.beta=0.5", "preference.micro_batch_size=2"])
    scorer = PairScorer(config, tokenizer)
    cfg = config.preference.loss
    with torch.no_grad():
        loss, metrics = pair_loss_share(tiny_model, scorer, cfg, ROWS, total_pairs=4)  # half of a 4-pair step
        margins = []
        for row in ROWS:
            chosen = hand_sequence_log_prob(tiny_model, tokenizer, row["prompt"], row["chosen"])
            rejected = hand_sequence_log_prob(tiny_model, tokenizer, row["prompt"], row["rejected"])
            margins.append(0.5 * ((chosen - row["ref_chosen"]) - (rejected - row["ref_rejected"])))
    expected = -F.logsigmoid(torch.tensor(margins)).mean() * (2 / 4)
    assert torch.allclose(loss, expected, atol=1e-4)
    assert abs(metrics["reward_margin"] - sum(margins) / 2) < 1e-4
    assert metrics["reward_accuracy"] == sum(m > 0 for m in margins) / 2


def test_simpo_uses_length_averaged_log_probs(tiny_model, tokenizer):
    config = load_config(None, ["preference.loss.name=simpo", "preference.loss.beta=2.0"])
    scorer = PairScorer(config, tokenizer)
    with torch.no_grad():
        loss, _ = pair_loss_share(tiny_model, scorer, config.preference.loss, ROWS[:1], total_pairs=1)
        chosen = hand_sequence_log_prob(tiny_model, tokenizer, "12+3=", "15") / 3  # "15" + EOS
        rejected = hand_sequence_log_prob(tiny_model, tokenizer, "12+3=", "1") / 2
    expected = -F.logsigmoid(torch.tensor(2.0 * chosen - 2.0 * rejected - PreferenceLossConfig().simpo_gamma))
    assert torch.allclose(loss, expected, atol=1e-4)


def test_reward_model_reads_the_last_real_token(tiny_model):
    model = reward_model_from_lm(tiny_model)
    ids = torch.tensor([[0, 20, 21, 22, 0], [20, 21, 22, 23, 24]])
    mask = (ids != 0).long()
    with torch.no_grad():
        scores = sequence_rewards(model, ids, mask)
        hidden = model.model(input_ids=ids, attention_mask=mask,
                             position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state
        by_hand = model.score(torch.stack([hidden[0, 3], hidden[1, 4]]))[:, 0]
    assert torch.allclose(scores, by_hand, atol=1e-5)


def test_pairs_for_the_reward_model_end_at_the_response(tokenizer):
    """Chosen rows then rejected ones, each the prompt and the response and nothing after (no EOS)."""
    batch = reward_model_batch(ROWS, tokenizer, False, 32)
    kept = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
    assert [tokenizer.decode(ids) for ids in kept] == ["12+3=15", "1+1=2", "12+3=1", "1+1=11"]
    assert [len(ids) for ids in kept] == [7, 5, 6, 6] and tokenizer.eos_token_id not in sum(kept, [])


def test_reward_model_pair_accuracy_and_reward_round_trip(tiny_model, tokenizer, tmp_path):
    from rlxf.algos import bradley_terry_loss
    from rlxf.rewards.registry import build_reward

    model = reward_model_from_lm(tiny_model)
    batch = reward_model_batch(ROWS, tokenizer, False, 32)
    with torch.no_grad():
        chosen, rejected = pair_scores(model, batch)
    loss, accuracy = bradley_terry_loss(chosen, rejected)
    assert accuracy == float(((chosen - rejected) > 0).float().mean())
    assert torch.allclose(loss, -F.logsigmoid(chosen - rejected).mean())
    # saved, it loads as the RL reward and scores prompt + response as training did
    model.save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    reward = build_reward("reward_model", {"path": str(tmp_path / "rm")})
    out = reward.score([r["prompt"] for r in ROWS], [r["chosen"] for r in ROWS], [{}, {}])
    assert torch.allclose(torch.tensor(out.scores), chosen, atol=1e-4)
