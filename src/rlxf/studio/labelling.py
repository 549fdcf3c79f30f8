"""Handing out pairs and recording verdicts, so that nothing is lost and nothing is counted twice.

* :func:`next_pair` gives a labeller the pair they were already shown and have not answered (a reload
  or a restarted server shows the same pair, same order), else a new pair: one they have not labelled,
  that fewer than ``overlap`` labellers have labelled or hold open, fewest labels first. Each issue has a
  random token and a random left/right order, both recorded.
* :func:`submit_label` accepts a verdict only for an open issue of that labeller; the label row and
  the issue's closing commit together, before the answer (and the next pair) goes back. Sending the same
  verdict for the same token again is answered as done (a retried request); another verdict is refused.
* :func:`undo_last` marks the labeller's latest label undone (the row stays) and reopens its issue.
"""

from __future__ import annotations

import secrets

from rlxf.studio import limits
from rlxf.studio.campaigns import get_campaign
from rlxf.studio.limits import InputError
from rlxf.studio.store import Store, now

# Shown verdict -> canonical verdict for (not swapped, swapped). "A" is the left response.
SHOWN_VERDICTS = {
    "A": ("first", "second"),
    "B": ("second", "first"),
    "tie": ("tie", "tie"),
    "both_bad": ("both_bad", "both_bad"),
    "skip": ("skip", "skip"),
}
CANONICAL_TO_SHOWN = {("first", 0): "A", ("second", 0): "B", ("first", 1): "B", ("second", 1): "A"}


class NotIssued(InputError):
    """A label for a pair the server did not hand to this labeller (or already answered)."""


def _shown(pair: dict, issue: dict) -> dict:
    left, right = (pair["second"], pair["first"]) if issue["swapped"] else (pair["first"], pair["second"])
    return {"token": issue["token"], "pair_id": pair["id"], "position": pair["position"], "prompt": pair["prompt"],
            "left": left, "right": right, "swapped": bool(issue["swapped"])}


def next_pair(store: Store, campaign_id: int, labeller: str) -> dict | None:
    """The pair to show ``labeller`` now (see the module docstring), or None when there is none left."""
    labeller = limits.name(labeller, "labeller name")
    campaign = get_campaign(store, campaign_id)
    stale = now() - limits.ISSUE_TTL_SECONDS
    with store.transaction() as db:
        # A pair held past the time-to-live went back to the pool; once others filled its overlap, it is
        # withdrawn from its first holder too (else the pair would get one label more than asked for).
        db.execute(
            """UPDATE issues SET closed = 1 WHERE labeller = ? AND closed = 0 AND issued <= ?
                 AND pair_id IN (SELECT p.id FROM pairs p WHERE p.campaign_id = ? AND
                   (SELECT COUNT(DISTINCT l.labeller) FROM labels l WHERE l.pair_id = p.id AND l.undone = 0
                      AND l.verdict != 'skip') >= ?)""",
            (labeller, stale, campaign_id, campaign["overlap"]),
        )
        issue = db.execute(
            """SELECT i.* FROM issues i JOIN pairs p ON p.id = i.pair_id
               WHERE i.labeller = ? AND i.closed = 0 AND p.campaign_id = ? ORDER BY i.issued LIMIT 1""",
            (labeller, campaign_id),
        ).fetchone()
        if issue is None:
            pair = db.execute(
                """SELECT p.id,
                     (SELECT COUNT(DISTINCT l.labeller) FROM labels l
                        WHERE l.pair_id = p.id AND l.undone = 0 AND l.verdict != 'skip') AS done,
                     (SELECT COUNT(*) FROM issues i WHERE i.pair_id = p.id AND i.closed = 0 AND i.issued > ?) AS held
                   FROM pairs p
                   WHERE p.campaign_id = ?
                     AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.pair_id = p.id AND l.labeller = ? AND l.undone = 0)
                     AND done + held < ?
                   ORDER BY done + held, p.position LIMIT 1""",
                (stale, campaign_id, labeller, campaign["overlap"]),
            ).fetchone()
            if pair is None:
                return None
            token = secrets.token_urlsafe(18)
            db.execute("INSERT INTO issues (token, pair_id, labeller, swapped, issued) VALUES (?, ?, ?, ?, ?)",
                       (token, pair["id"], labeller, secrets.randbelow(2), now()))
            issue = db.execute("SELECT * FROM issues WHERE token = ?", (token,)).fetchone()
        pair = db.execute("SELECT * FROM pairs WHERE id = ?", (issue["pair_id"],)).fetchone()
    return _shown(dict(pair), dict(issue))


def submit_label(store: Store, token: str, labeller: str, shown_verdict: str, reason: str = "") -> dict:
    """Record a verdict on an issued pair; returns the label row. Raises :class:`NotIssued` or InputError."""
    labeller = limits.name(labeller, "labeller name")
    reason = limits.bounded_text(reason or "", "reason", limits.MAX_REASON_CHARS)
    if shown_verdict not in SHOWN_VERDICTS:
        raise InputError(f"verdict must be one of {', '.join(SHOWN_VERDICTS)}, got {str(shown_verdict)[:40]!r}")
    token = limits.bounded_text(token, "token", 64)
    with store.transaction() as db:
        issue = db.execute("SELECT i.*, p.campaign_id FROM issues i JOIN pairs p ON p.id = i.pair_id "
                           "WHERE i.token = ?", (token,)).fetchone()
        if issue is None or issue["labeller"] != labeller:
            raise NotIssued("this pair was not issued to this labeller: ask for the next pair")
        verdict = SHOWN_VERDICTS[shown_verdict][issue["swapped"]]
        if issue["closed"]:
            done = db.execute("SELECT * FROM labels WHERE issue_token = ? AND undone = 0", (token,)).fetchone()
            if done is not None and done["verdict"] == verdict and done["reason"] == reason:
                return dict(done)  # the same request again (a retry): already recorded
            if done is None:
                raise NotIssued("this pair was taken back (held too long, or an undo came first): ask for the next pair")
            raise NotIssued("this pair was already labelled: undo first to change the verdict")
        label_id = db.execute(
            """INSERT INTO labels (campaign_id, pair_id, labeller, verdict, reason, swapped, issue_token, created)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            (issue["campaign_id"], issue["pair_id"], labeller, verdict, reason, issue["swapped"], token, now()),
        ).lastrowid
        db.execute("UPDATE issues SET closed = 1 WHERE token = ?", (token,))
        return dict(db.execute("SELECT * FROM labels WHERE id = ?", (label_id,)).fetchone())


def undo_last(store: Store, campaign_id: int, labeller: str) -> dict | None:
    """Undo ``labeller``'s latest label in the campaign; its pair is shown again next. None if nothing to undo."""
    labeller = limits.name(labeller, "labeller name")
    with store.transaction() as db:
        last = db.execute(
            "SELECT * FROM labels WHERE campaign_id = ? AND labeller = ? AND undone = 0 ORDER BY id DESC LIMIT 1",
            (campaign_id, labeller),
        ).fetchone()
        if last is None:
            return None
        # The pair the labeller holds now goes back to the pool, so the undone one is shown first.
        db.execute("UPDATE issues SET closed = 1 WHERE labeller = ? AND closed = 0 AND pair_id IN "
                   "(SELECT id FROM pairs WHERE campaign_id = ?)", (labeller, campaign_id))
        db.execute("UPDATE labels SET undone = 1 WHERE id = ?", (last["id"],))
        db.execute("UPDATE issues SET closed = 0, issued = ? WHERE token = ?", (now(), last["issue_token"]))
    return dict(last)


def progress(store: Store, campaign_id: int, labeller: str | None = None) -> dict:
    """Counts for the progress bar: pairs, labels needed (pairs x overlap), labels given, and this labeller's."""
    campaign = get_campaign(store, campaign_id)
    counts = store.one(
        """SELECT (SELECT COUNT(*) FROM pairs WHERE campaign_id = :c) AS pairs,
                  (SELECT COUNT(*) FROM labels WHERE campaign_id = :c AND undone = 0 AND verdict != 'skip') AS labels,
                  (SELECT COUNT(*) FROM labels WHERE campaign_id = :c AND undone = 0 AND labeller = :who) AS mine""",
        {"c": campaign_id, "who": labeller or ""},
    )
    return {**counts, "needed": counts["pairs"] * campaign["overlap"], "overlap": campaign["overlap"]}
