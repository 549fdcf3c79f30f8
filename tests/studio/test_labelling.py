"""The label store: issued pairs, verdicts in the canonical order, overlap, undo, restart, bounds."""

from __future__ import annotations

import pytest

from rlxf.studio import labelling, limits
from rlxf.studio.campaigns import create_campaign, list_campaigns, pairs_from_row, parse_pairs_jsonl
from rlxf.studio.labelling import NotIssued, next_pair, progress, submit_label, undo_last
from rlxf.studio.limits import MAX_REASON_CHARS, InputError
from rlxf.studio.store import Store
from tests.studio.helpers import pair_rows, pairs_jsonl


def make_campaign(tmp_path, overlap=1, n=4) -> tuple[Store, int]:
    store = Store(tmp_path / "studio.sqlite")
    pairs = parse_pairs_jsonl(pairs_jsonl(pair_rows()[:n]), "pairs.jsonl")
    return store, create_campaign(store, "adds", pairs, "import:pairs.jsonl", overlap=overlap)


def test_store_is_wal_with_full_sync(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    assert store.one("PRAGMA journal_mode")["journal_mode"] == "wal"
    assert store.one("PRAGMA synchronous")["synchronous"] == 2  # FULL


def test_a_pair_stays_issued_until_answered_same_token_same_order(tmp_path):
    store, cid = make_campaign(tmp_path)
    first = next_pair(store, cid, "ann")
    again = next_pair(store, cid, "ann")
    assert again == first and first["position"] == 0 and first["prompt"] == "17+5="
    stored = store.one("SELECT first, second FROM pairs WHERE id = ?", (first["pair_id"],))
    assert {stored["first"], stored["second"]} == {"22", "12"}
    assert (first["left"], first["right"]) == ((stored["second"], stored["first"]) if first["swapped"]
                                               else (stored["first"], stored["second"]))


def test_shown_verdict_maps_to_canonical_order(tmp_path):
    store, cid = make_campaign(tmp_path)
    shown = next_pair(store, cid, "ann")
    label = submit_label(store, shown["token"], "ann", "A", "left is the true sum")
    stored = store.one("SELECT first FROM pairs WHERE id = ?", (shown["pair_id"],))
    assert label["verdict"] == ("first" if shown["left"] == stored["first"] else "second")
    assert label["verdict"] == ("second" if shown["swapped"] else "first")
    assert label["swapped"] == int(shown["swapped"]) and label["reason"] == "left is the true sum"
    assert labelling.SHOWN_VERDICTS["B"] == ("second", "first")


def test_label_for_a_pair_not_issued_is_rejected(tmp_path):
    store, cid = make_campaign(tmp_path)
    shown = next_pair(store, cid, "ann")
    with pytest.raises(NotIssued, match="not issued"):
        submit_label(store, "made-up-token", "ann", "A")
    with pytest.raises(NotIssued, match="not issued"):
        submit_label(store, shown["token"], "bob", "A")  # issued to ann, not to bob
    assert store.one("SELECT COUNT(*) AS n FROM labels")["n"] == 0


def test_a_retried_label_is_stored_once_and_a_changed_one_refused(tmp_path):
    store, cid = make_campaign(tmp_path)
    shown = next_pair(store, cid, "ann")
    one = submit_label(store, shown["token"], "ann", "B")
    assert submit_label(store, shown["token"], "ann", "B") == one
    with pytest.raises(NotIssued, match="already labelled"):
        submit_label(store, shown["token"], "ann", "A")
    assert store.one("SELECT COUNT(*) AS n FROM labels")["n"] == 1


def test_overlap_one_gives_concurrent_labellers_different_pairs(tmp_path):
    store, cid = make_campaign(tmp_path, overlap=1, n=3)
    ann, bob = next_pair(store, cid, "ann"), next_pair(store, cid, "bob")
    assert (ann["position"], bob["position"]) == (0, 1)
    submit_label(store, ann["token"], "ann", "A")
    assert next_pair(store, cid, "ann")["position"] == 2
    assert next_pair(store, cid, "cid") is None  # every pair labelled or held


def test_overlap_two_sends_each_pair_to_two_different_labellers(tmp_path):
    store, cid = make_campaign(tmp_path, overlap=2, n=2)
    seen: dict[str, list[int]] = {"ann": [], "bob": [], "cid": []}
    for who in ["ann", "bob", "ann", "bob", "cid"]:
        shown = next_pair(store, cid, who)
        if shown is None:
            continue
        seen[who].append(shown["position"])
        submit_label(store, shown["token"], who, "A")
    assert seen == {"ann": [0, 1], "bob": [1, 0], "cid": []}  # fewest labels first
    assert progress(store, cid) == {"pairs": 2, "labels": 4, "mine": 0, "needed": 4, "overlap": 2}


def test_a_pair_held_too_long_goes_to_someone_else_and_is_withdrawn(tmp_path, monkeypatch):
    store, cid = make_campaign(tmp_path, overlap=1, n=2)
    held = next_pair(store, cid, "ann")
    clock = [labelling.now() + limits.ISSUE_TTL_SECONDS + 1]  # ann walked away for longer than the TTL
    monkeypatch.setattr(labelling, "now", lambda: clock[0])
    taken = next_pair(store, cid, "bob")
    assert taken["position"] == held["position"] == 0  # back in the pool: fewest labels, first position
    submit_label(store, taken["token"], "bob", "A")
    back = next_pair(store, cid, "ann")
    assert back["position"] == 1  # pair 0 has its one label: withdrawn from ann
    with pytest.raises(NotIssued, match="taken back"):
        submit_label(store, held["token"], "ann", "A")


def test_skip_hides_the_pair_from_that_labeller_only(tmp_path):
    store, cid = make_campaign(tmp_path, overlap=1, n=2)
    shown = next_pair(store, cid, "ann")
    submit_label(store, shown["token"], "ann", "skip")
    assert next_pair(store, cid, "ann")["position"] == 1
    assert next_pair(store, cid, "bob")["position"] == 0  # a skip is not a label: the pair is still open
    assert progress(store, cid)["labels"] == 0


def test_undo_reopens_the_last_pair_and_keeps_the_row(tmp_path):
    store, cid = make_campaign(tmp_path)
    shown = next_pair(store, cid, "ann")
    submit_label(store, shown["token"], "ann", "A")
    following = next_pair(store, cid, "ann")
    assert following["position"] == 1
    assert undo_last(store, cid, "ann")["issue_token"] == shown["token"]
    assert next_pair(store, cid, "ann") == shown  # the undone pair again, same order
    submit_label(store, shown["token"], "ann", "B")
    rows = store.query("SELECT verdict, undone FROM labels ORDER BY id")
    flipped = {"first": "second", "second": "first"}
    assert [r["undone"] for r in rows] == [1, 0] and rows[1]["verdict"] == flipped[rows[0]["verdict"]]
    assert next_pair(store, cid, "ann")["position"] == 1  # the pair held before the undo comes back next
    assert undo_last(store, cid, "nobody") is None


def test_reopening_the_file_loses_and_duplicates_nothing(tmp_path):
    store, cid = make_campaign(tmp_path)
    for _ in range(2):
        shown = next_pair(store, cid, "ann")
        submit_label(store, shown["token"], "ann", "A")
    held = next_pair(store, cid, "ann")
    store.close()
    reopened = Store(tmp_path / "studio.sqlite")
    assert progress(reopened, cid, "ann")["mine"] == 2
    assert next_pair(reopened, cid, "ann") == held
    assert list_campaigns(reopened)[0] | {"created": 0} == {
        "id": cid, "name": "adds", "source": "import:pairs.jsonl", "checkpoint": None, "overlap": 1, "created": 0,
        "pairs": 4, "labelled_pairs": 2, "labels": 2, "labellers": 1}


def test_bad_input_names_the_culprit(tmp_path):
    store, cid = make_campaign(tmp_path)
    shown = next_pair(store, cid, "ann")
    with pytest.raises(InputError, match="reason has 2001 characters"):
        submit_label(store, shown["token"], "ann", "A", "x" * (MAX_REASON_CHARS + 1))
    with pytest.raises(InputError, match="verdict must be one of"):
        submit_label(store, shown["token"], "ann", "C")
    with pytest.raises(InputError, match="labeller name"):
        next_pair(store, cid, "x" * 65)
    with pytest.raises(InputError, match="pairs.jsonl:2: not JSON"):
        parse_pairs_jsonl('{"prompt": "1+1=", "chosen": "2", "rejected": "3"}\n{oops\n', "pairs.jsonl")
    with pytest.raises(InputError, match="pairs.jsonl:1: response has 20001 characters"):
        parse_pairs_jsonl(pairs_jsonl([{"prompt": "p", "chosen": "y" * 20_001, "rejected": "n"}]), "pairs.jsonl")
    with pytest.raises(InputError, match="exists already"):
        create_campaign(store, "adds", [({"prompt": "p"}, "a", "b")], "x")
    assert store.one("SELECT COUNT(*) AS n FROM labels")["n"] == 0


def test_stored_order_is_shuffled_by_campaign_name(tmp_path):
    store, cid = make_campaign(tmp_path, n=8)
    firsts = [r["first"] for r in store.query("SELECT first FROM pairs ORDER BY position")]
    # random.Random("adds") swaps pairs 0, 4 and 5: there the imported `rejected` is stored first
    assert firsts == ["12", "51", "18", "130", "52", "82", "10", "42"]


def test_rows_with_several_responses_make_every_distinct_pair():
    pairs = pairs_from_row({"prompt": "2+2=", "responses": ["4", "5", "4", "22"]}, "row")
    assert [(a, b) for _, a, b in pairs] == [("4", "5"), ("4", "22"), ("5", "22")]
    assert pairs[0][0] == {"prompt": "2+2="}
