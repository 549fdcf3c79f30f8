"""``/api/campaigns`` and ``/api/labels``: campaigns, the labelling exchange, AI labels, export, training."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from rlxf.rollout.sampling import SamplingParams
from rlxf.studio import labelling, limits
from rlxf.studio.agreement import campaign_agreement, judges_of
from rlxf.studio.ai_labels import label_with_reward, reward_from_recipe
from rlxf.studio.campaigns import create_campaign, get_campaign, list_campaigns, parse_pairs_jsonl
from rlxf.studio.export import export_campaign, label_rows, preference_rows
from rlxf.studio.limits import InputError
from rlxf.studio.sampling import sample_campaign_pairs
from rlxf.studio.security import read_json
from rlxf.studio.train_action import campaign_overrides, start_training

router = APIRouter(prefix="/api")


def _store(request: Request):
    return request.app.state.store


def _int(body: dict, key: str, default: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"`{key}` must be an integer")
    return value


@router.get("/campaigns")
def campaigns(request: Request) -> list[dict]:
    return list_campaigns(_store(request))


@router.post("/campaigns/import")
async def import_campaign(request: Request) -> dict:
    body = await read_json(request)
    text = limits.bounded_text(body.get("jsonl", ""), "jsonl", limits.MAX_BODY_BYTES)
    source = limits.name(body.get("source") or "upload.jsonl", "source")
    pairs = parse_pairs_jsonl(text, source)
    campaign_id = await run_in_threadpool(create_campaign, _store(request), body.get("name"), pairs,
                                          f"import:{source}", _int(body, "overlap", 1))
    return {"id": campaign_id, "pairs": len(pairs)}


@router.post("/campaigns/sample")
async def sample_campaign(request: Request) -> dict:
    body = await read_json(request, 64 * 1024)
    try:
        params = SamplingParams(n=_int(body, "n", 2), temperature=float(body.get("temperature", 1.0)),
                                top_p=float(body.get("top_p", 1.0)), top_k=_int(body, "top_k", 0),
                                max_new_tokens=_int(body, "max_new_tokens", 32))
    except (TypeError, ValueError) as err:
        raise InputError(f"sampling parameters: {err}") from None
    checkpoint = limits.bounded_text(body.get("checkpoint"), "checkpoint", 1000)
    prompts = limits.bounded_text(body.get("prompts"), "prompts", 1000)
    chat_template = body.get("chat_template")  # absent or null: the checkpoint's template when it has one
    if chat_template is not None and not isinstance(chat_template, bool):
        raise InputError("`chat_template` must be true, false or null (null: use the template when there is one)")
    pairs, sampling = await run_in_threadpool(sample_campaign_pairs, checkpoint, prompts, params,
                                              min(_int(body, "limit", 100), limits.MAX_PAIRS_PER_CAMPAIGN),
                                              _int(body, "seed", 0), chat_template)
    campaign_id = await run_in_threadpool(create_campaign, _store(request), body.get("name"), pairs, "sampled",
                                          _int(body, "overlap", 1), checkpoint, sampling)
    return {"id": campaign_id, "pairs": len(pairs)}


@router.get("/campaigns/{campaign_id}")
def campaign(request: Request, campaign_id: int, labeller: str = "") -> dict:
    store = _store(request)
    return {**get_campaign(store, campaign_id), "progress": labelling.progress(store, campaign_id, labeller),
            "judges": judges_of(store, campaign_id)}


@router.get("/campaigns/{campaign_id}/next")
def next_pair(request: Request, campaign_id: int, labeller: str) -> dict:
    store = _store(request)
    return {"pair": labelling.next_pair(store, campaign_id, labeller),
            "progress": labelling.progress(store, campaign_id, labeller)}


@router.post("/labels")
async def label(request: Request) -> dict:
    """Record a verdict; the answer brings the next pair, so the page never shows one before the label is stored."""
    body = await read_json(request, 16 * 1024)
    store = _store(request)
    saved = await run_in_threadpool(labelling.submit_label, store, body.get("token"), body.get("labeller"),
                                    body.get("verdict"), body.get("reason", ""))
    following = await run_in_threadpool(next_pair, request, saved["campaign_id"], saved["labeller"])
    return {"label": saved, **following}


@router.post("/campaigns/{campaign_id}/undo")
async def undo(request: Request, campaign_id: int) -> dict:
    body = await read_json(request, 16 * 1024)
    undone = await run_in_threadpool(labelling.undo_last, _store(request), campaign_id, body.get("labeller"))
    following = await run_in_threadpool(next_pair, request, campaign_id, body.get("labeller"))
    return {"undone": undone, **following}


@router.post("/campaigns/{campaign_id}/ai-labels")
async def ai_labels(request: Request, campaign_id: int) -> dict:
    """Judge every pair with a recipe's reward (``recipe`` + ``overrides``) or a reward model (``reward_model``)."""
    body = await read_json(request, 64 * 1024)
    overrides = body.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise InputError("`overrides` must be a list of key=value strings")
    if body.get("reward_model"):
        path = limits.bounded_text(body["reward_model"], "reward_model", 1000)
        overrides = ["reward.function=reward_model", f"reward.kwargs={{path: {path}}}"]
    judge, reward = await run_in_threadpool(reward_from_recipe, body.get("recipe"), overrides)
    judge = body.get("name") or judge
    count = await run_in_threadpool(label_with_reward, _store(request), campaign_id, reward, judge,
                                    float(body.get("tie_margin", 0.0)))
    return {"judge": judge, "pairs": count}


@router.get("/campaigns/{campaign_id}/agreement")
def agreement(request: Request, campaign_id: int, judge: str) -> dict:
    return campaign_agreement(_store(request), campaign_id, judge)


def _export_path(request: Request, campaign_id: int):
    name = get_campaign(_store(request), campaign_id)["name"]
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
    return request.app.state.settings.runs_dir / "studio-exports" / f"{campaign_id}-{safe}.jsonl"


@router.post("/campaigns/{campaign_id}/export")
def export(request: Request, campaign_id: int) -> dict:
    return export_campaign(_store(request), campaign_id, _export_path(request, campaign_id))


@router.get("/campaigns/{campaign_id}/preferences.jsonl", response_class=PlainTextResponse)
def preferences_file(request: Request, campaign_id: int) -> str:
    import json

    rows, _ = preference_rows(_store(request), campaign_id)
    return "".join(json.dumps(r) + "\n" for r in rows)


@router.get("/campaigns/{campaign_id}/labels")
def labels(request: Request, campaign_id: int) -> list[dict]:
    return label_rows(_store(request), campaign_id)


@router.post("/campaigns/{campaign_id}/train")
async def train(request: Request, campaign_id: int) -> dict:
    """Export, then start ``rlxf train`` (``kind``: reward_model or dpo) on the export in the background."""
    body = await read_json(request, 16 * 1024)
    kind = limits.bounded_text(body.get("kind", "reward_model"), "kind", 40)
    exported = await run_in_threadpool(export, request, campaign_id)
    if exported["exported"] < 2:
        raise InputError(f"only {exported['exported']} pairs have a preferred response: label more first")
    campaign = get_campaign(_store(request), campaign_id)
    rows, _ = preference_rows(_store(request), campaign_id)
    overrides = [f"data.eval_size={max(1, exported['exported'] // 5)}", *campaign_overrides(campaign, rows)]
    started = start_training(kind, exported["path"], request.app.state.settings.runs_dir, campaign["name"], overrides)
    return {"export": exported, **started}
