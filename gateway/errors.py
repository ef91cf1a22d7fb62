"""Typed gateway errors and the one place that turns every error into an OpenAI error body."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.security_headers import SECURITY_HEADERS
from specdec.errors import InvalidRequestError, describe_validation_error, field_path

log = logging.getLogger(__name__)


class OpenAIError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def overloaded(message: str, retry_after_s: float) -> OpenAIError:
    return OpenAIError(
        429, message, "rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": str(max(1, round(retry_after_s)))}
    )


CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that closed the connection: logged and counted, read by nobody


def client_gone() -> OpenAIError:
    """The client closed the connection before its answer."""
    return OpenAIError(CLIENT_CLOSED_REQUEST, "the client closed the connection before the answer was ready", "client_closed_request")


def unavailable(message: str) -> OpenAIError:
    return OpenAIError(503, message, "service_unavailable", code="upstream_unavailable", headers={"Retry-After": "2"})


def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = error.errors()
    first = problems[0] if problems else {"loc": (), "msg": "invalid request", "type": ""}
    param = field_path(first.get("loc", ()), skip=("body",)) or None
    if first.get("type") == "json_invalid":
        return bad_request(f"the body is not valid JSON: {first.get('msg')}").response()
    message = describe_validation_error(problems, skip=("body",), reason=_reason)
    return bad_request(message, param).response()


def _reason(problem: dict) -> str:
    if problem.get("type") == "extra_forbidden":  # as OpenAI's API answers an unknown field
        return "unrecognized request argument: this server does not support this field"
    return str(problem.get("msg"))


def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}.get(error.status_code, "invalid_request_error")
    code = {413: "request_too_large", 404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
    return OpenAIError(error.status_code, str(error.detail), kind, code=code).response()


def _unexpected(request: Request, error: Exception) -> JSONResponse:
    log.exception("unhandled error on %s", request.url.path, exc_info=error)
    # Answered outside every middleware (Starlette's ServerErrorMiddleware): the headers are set here.
    return OpenAIError(500, "internal error; the request was not completed", "server_error", headers=SECURITY_HEADERS).response()


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(OpenAIError, lambda request, error: error.response())
    app.add_exception_handler(InvalidRequestError, lambda request, error: bad_request(str(error), error.field).response())
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(json.JSONDecodeError, lambda request, error: bad_request(f"the body is not valid JSON: {error}").response())
    app.add_exception_handler(Exception, _unexpected)
