"""The playground page at `/`: static files shipped in this package, served as they are (no build)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from gateway.security_headers import SECURITY_HEADERS

STATIC = Path(__file__).parent / "static"
# The browser itself refuses any request that would leave this origin (no CDN, no tracker), any
# form submission (so the API key can never end up in a URL) and framing by other sites: the
# SECURITY_HEADERS every response carries, set by the page itself too.


def install_playground(app: FastAPI) -> None:
    """`GET /` is the page and `/playground/*` its scripts and styles; both are public: the API calls carry the key."""

    @app.get("/", include_in_schema=False)
    async def playground() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)

    app.mount("/playground", StaticFiles(directory=STATIC / "playground"), name="playground")
