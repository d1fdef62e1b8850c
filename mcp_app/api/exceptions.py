"""The one place where API errors become responses: ``{"error": {"code", "message", "fields"?}}`` with a stable
code (the constants below; docs/api.md, "Errors"). Unknown exceptions are logged with their traceback and
answered as a sanitised ``internal_error`` (500); an unavailable database (``mcp_app.database``) is
``service_unavailable`` (503 with ``Retry-After``), logged as one line.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import set_rollback

from ..database import DATABASE_ERRORS, RETRY_AFTER_SECONDS

logger = logging.getLogger("mcp_app.api")

NOT_AUTHENTICATED = "not_authenticated"
AUTHENTICATION_FAILED = "authentication_failed"
PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"
VALIDATION_ERROR = "validation_error"
PARSE_ERROR = "parse_error"
METHOD_NOT_ALLOWED = "method_not_allowed"
NOT_ACCEPTABLE = "not_acceptable"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
THROTTLED = "throttled"
CONFLICT = "conflict"
INTERNAL_ERROR = "internal_error"
SERVICE_UNAVAILABLE = "service_unavailable"

ERROR_CODES: dict[str, str] = {
    NOT_AUTHENTICATED: "401: no credentials were sent.",
    AUTHENTICATION_FAILED: "401: the API key or session is invalid, revoked or expired.",
    PERMISSION_DENIED: "403: authenticated, but your role does not allow this (e.g. a viewer writing).",
    NOT_FOUND: "404: no such object among those you can see (another tenant's objects are not found either).",
    VALIDATION_ERROR: "400: the input is invalid; `fields` says where.",
    PARSE_ERROR: "400: the body is not valid JSON (or form data).",
    METHOD_NOT_ALLOWED: "405: the endpoint does not support this method.",
    NOT_ACCEPTABLE: "406: no representation matches the Accept header.",
    UNSUPPORTED_MEDIA_TYPE: "415: the body's content type is not accepted.",
    THROTTLED: "429: too many requests.",
    CONFLICT: "409: the request conflicts with the current state.",
    INTERNAL_ERROR: "500: an unexpected error; it is logged on the server.",
    SERVICE_UNAVAILABLE: "503: the database is unreachable or did not answer in time; retry after `Retry-After`.",
}


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unreachable; retry shortly."
    default_code = SERVICE_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__()
        self.wait = RETRY_AFTER_SECONDS  # Retry-After, as for a throttled request


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = CONFLICT


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields is not None:
        error["fields"] = fields
    return {"error": error}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's ``EXCEPTION_HANDLER`` for the mcp_app API views (set per view, not project-wide)."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif isinstance(exc, DATABASE_ERRORS):
        # Refused, failed or past its bounds (mcp_app.database): the client retries; no traceback to log.
        logger.warning("database unavailable in API view: %s", type(exc).__name__)
        exc = ServiceUnavailable()

    if not isinstance(exc, exceptions.APIException):
        view = context.get("view")
        logger.exception("Unhandled error in API view %s", type(view).__name__ if view else "?")
        set_rollback()
        return Response(
            error_body(INTERNAL_ERROR, "Internal server error."), status=status.HTTP_500_INTERNAL_SERVER_ERROR
        )

    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None) is not None:
        headers["Retry-After"] = str(math.ceil(exc.wait))  # type: ignore[attr-defined]  # whole seconds, never early

    if isinstance(exc, exceptions.ValidationError):  # DRF's code of these is "invalid"; its others are ours
        detail = exc.detail
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        body = error_body(VALIDATION_ERROR, "Invalid input.", _plain(fields))
    else:
        body = error_body(str(exc.default_code or "error"), str(exc.detail))
    set_rollback()
    return Response(body, status=exc.status_code, headers=headers)


def _plain(value: Any) -> Any:
    """ErrorDetail strings and nested lists/dicts as plain JSON values."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. not_found, validation_error.")
    message = serializers.CharField(help_text="Human-readable summary.")
    # A field named "fields" (the error body's key): DRF's metaclass takes it out of the class attributes, so it
    # does not shadow ``Serializer.fields`` at run time; the stubs cannot know that.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.JSONField(), required=False, help_text="Validation errors per field (non_field_errors)."
    )


class ErrorSerializer(serializers.Serializer):
    """The body of every error response."""

    error = ErrorDetailSerializer()
