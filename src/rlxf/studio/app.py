"""The studio's ASGI app: static pages, the JSON API, one error shape.

Every page is one HTML shell (``static/page.html``) naming its script; the script asks the API for data and
writes it with ``textContent``, so no HTML the server sends ever holds model output. A user's mistake answers
``{"error": message}`` (400; 409 for a label on a pair not issued; 413 for an oversized body).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from rlxf.config import ConfigError
from rlxf.data.files import DatasetError
from rlxf.studio import api_campaigns, api_runs
from rlxf.studio.labelling import NotIssued
from rlxf.studio.limits import InputError
from rlxf.studio.security import BodyTooLarge, TokenAndHeaders
from rlxf.studio.store import Store

STATIC = Path(__file__).resolve().parent / "static"
PAGES = {"/": ("Runs", "runs.js"), "/run": ("Run", "run.js"), "/compare": ("Compare", "compare.js"),
         "/campaigns": ("Labelling", "campaigns.js"), "/label": ("Label", "label.js"),
         "/agreement": ("Agreement", "agreement.js")}
STATUS_OF = {BodyTooLarge: 413, NotIssued: 409, InputError: 400}


@dataclass(frozen=True)
class StudioSettings:
    runs_dir: Path
    db_path: Path
    token: str | None = None


def _page(title: str, script: str):
    html = (STATIC / "page.html").read_text().replace("{title}", title).replace("{script}", script)

    async def page() -> HTMLResponse:
        return HTMLResponse(html)
    return page


def make_app(settings: StudioSettings) -> FastAPI:
    store = Store(settings.db_path)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        store.close()

    app = FastAPI(title="rlxf studio", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.settings, app.state.store = settings, store
    app.add_middleware(TokenAndHeaders, token=settings.token)
    app.include_router(api_runs.router)
    app.include_router(api_campaigns.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for route, (title, script) in PAGES.items():
        app.add_api_route(route, _page(title, script), methods=["GET"], include_in_schema=False)

    @app.exception_handler(InputError)
    async def input_error(request: Request, err: InputError) -> JSONResponse:
        status = next(code for kind, code in STATUS_OF.items() if isinstance(err, kind))
        return JSONResponse({"error": str(err)}, status)

    async def bad_request(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse({"error": str(err)}, 400)

    for kind in (ConfigError, DatasetError, FileNotFoundError):  # a bad recipe, prompt file or path
        app.add_exception_handler(kind, bad_request)
    return app
