"""Agreement numbers by hand, the judge's verdicts on a campaign, and the preference export."""

from __future__ import annotations

import pytest

from rlxf.data.preferences import read_preference_rows
from rlxf.rewards.registry import build_reward
from rlxf.studio.agreement import agreement_stats, campaign_agreement, cohens_kappa
from rlxf.studio.ai_labels import label_with_reward, verdict_from_scores
from rlxf.studio.campaigns import create_campaign, parse_pairs_jsonl
from rlxf.studio.export import export_campaign, label_rows
from rlxf.studio.labelling import next_pair, submit_label
from rlxf.studio.store import Store
from tests.studio.helpers import arithmetic_verdict, pair_rows, pairs_jsonl


def test_cohens_kappa_by_hand():
    # observed 3/4; chance (2*1 + 1*2 + 1*1) / 16 = 5/16; kappa = (12/16 - 5/16) / (11/16) = 7/11
    a = ["first", "first", "second", "none"]
    b = ["first", "second", "second", "none"]
    assert cohens_kappa(a, b) == pytest.approx(7 / 11)
    assert cohens_kappa(a, a) == 1.0
    assert cohens_kappa(["first", "second"], ["second", "first"]) == pytest.approx(-1.0)
    assert cohens_kappa(["first"] * 3, ["first"] * 3) is None  # one class on both sides: undefined
    assert agreement_stats(["tie", "both_bad", "first"], ["tie", "tie", "second"]) == {
        "n": 3, "accuracy": pytest.approx(2 / 3), "kappa": pytest.approx((2 / 3 - 4 / 9) / (1 - 4 / 9))}


def test_verdict_from_scores():
    assert [verdict_from_scores(1.0, 0.0), verdict_from_scores(0.2, 0.3), verdict_from_scores(0.5, 0.52, 0.05)] == [
        "first", "second", "tie"]


def labelled_campaign(tmp_path, wrong_for: set[str] = frozenset(), overlap: int = 1) -> tuple[Store, int]:
    """The 8 arithmetic pairs labelled by 'ann' with the truth, except prompts in ``wrong_for`` (flipped)."""
    store = Store(tmp_path / "studio.sqlite")
    cid = create_campaign(store, "adds", parse_pairs_jsonl(pairs_jsonl(pair_rows()), "p.jsonl"), "import", overlap)
    while (shown := next_pair(store, cid, "ann")) is not None:
        verdict = arithmetic_verdict(shown["prompt"], shown["left"], shown["right"])
        if shown["prompt"] in wrong_for:
            verdict = {"A": "B", "B": "A"}[verdict]
        submit_label(store, shown["token"], "ann", verdict, reason="checked the sum")
    return store, cid


def test_the_judge_labels_pairs_and_agreement_counts_its_one_mistake(tmp_path):
    store, cid = labelled_campaign(tmp_path)
    judge = build_reward("judge", {"backend": "tests.studio.helpers:arithmetic_judge"})
    assert label_with_reward(store, cid, judge, "judge") == 8
    result = campaign_agreement(store, cid, "judge")
    # Stored order (test_labelling: pairs 0, 4, 5 swapped): the true sum is `second` for 17+5, 56+6, 88+4,
    # `first` for the other five. Human: 5 first, 3 second. Judge: the same, but 48+3 is a tie (both 10):
    # 4 first, 3 second, 1 none. observed 7/8; chance (5*4 + 3*3 + 0*1)/64 = 29/64;
    # kappa = (56/64 - 29/64) / (35/64) = 27/35
    assert result["overall"] == {"n": 8, "accuracy": 7 / 8, "kappa": pytest.approx(27 / 35)}
    assert [(d["prompt"], d["human"], d["ai"]) for d in result["disagreements"]] == [("48+3=", "first", "tie")]
    assert result["labellers"] == {"ann": result["overall"]}


def test_agreement_with_a_disagreeing_labeller(tmp_path):
    store, cid = labelled_campaign(tmp_path, wrong_for={"17+5=", "9+9="})
    label_with_reward(store, cid, build_reward("judge", {"backend": "tests.studio.helpers:arithmetic_judge"}), "j")
    overall = campaign_agreement(store, cid, "j")["overall"]
    # Flipped: 17+5 (truth second -> human first), 9+9 (truth first -> human second). Human: 5 first,
    # 3 second; judge: 4 first, 3 second, 1 none. They agree on 5 pairs (not 48+3, 17+5, 9+9):
    # observed 5/8, chance 29/64 -> kappa = (40/64 - 29/64) / (35/64) = 11/35
    assert overall["accuracy"] == 5 / 8 and overall["kappa"] == pytest.approx(11 / 35)


def test_export_keeps_majorities_and_reads_back_as_preferences(tmp_path):
    store, cid = labelled_campaign(tmp_path, wrong_for={"9+9="})
    out = export_campaign(store, cid, tmp_path / "out" / "prefs.jsonl")
    assert out == {"pairs": 8, "exported": 8, "no_majority": 0, "unlabelled": 0, "path": str(tmp_path / "out" / "prefs.jsonl")}
    rows = read_preference_rows(out["path"])
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows][:3] == [
        ("17+5=", "22", "12"), ("48+3=", "51", "41"), ("9+9=", "8", "18")]  # the flipped label flips the pair
    assert rows[0]["answer"] == "22" and rows[0]["studio"]["labellers"] == ["ann"]
    assert rows[0]["studio"]["votes"] == {"second": 1}  # 17+5 is stored swapped: the true sum is `second`
    provenance = label_rows(store, cid)
    assert len(provenance) == 8 and {p["labeller"] for p in provenance} == {"ann"}
    assert {p["shown_left_right"] for p in provenance} <= {"first,second", "second,first"}


def test_ties_both_bad_and_split_votes_are_left_out(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    rows = pair_rows()[:4]
    cid = create_campaign(store, "c", parse_pairs_jsonl(pairs_jsonl(rows), "p"), "import", overlap=2)
    plan = {("ann", 0): "tie", ("bob", 0): "both_bad", ("ann", 1): "first", ("bob", 1): "second",
            ("ann", 2): "first", ("bob", 2): "tie", ("bob", 3): "skip"}  # bob first gets pair 3 (fewest labels)
    for who, count in (("ann", 3), ("bob", 4)):
        for _ in range(count):
            shown = next_pair(store, cid, who)
            canonical = plan[(who, shown["position"])]
            shown_verdict = {"first": "B" if shown["swapped"] else "A",
                             "second": "A" if shown["swapped"] else "B"}.get(canonical, canonical)
            submit_label(store, shown["token"], who, shown_verdict)
    out = export_campaign(store, cid, tmp_path / "p.jsonl")
    assert (out["exported"], out["no_majority"], out["unlabelled"]) == (1, 2, 1)
    # random.Random("c") stores pairs 0-2 swapped: pair 2's `first`, voted for by ann, is the imported rejected
    assert read_preference_rows(out["path"])[0]["chosen"] == rows[2]["rejected"]
