"""What every API view shares: JSON errors, pagination, access-restricted querysets, ETags.

Errors are always `{"detail": "<one sentence>", "errors": {"<field>": ["<rule>", ...]}, "request_id": "…"}`
(`errors` only for invalid input; `request_id` the request's, as its log lines carry it), unexpected ones
too (500, common/errors.py). Status codes: 400 invalid input, 401 not authenticated, 403 not allowed, 404 not
there or not visible to you, 409 a conflicting concurrent change, 412 `If-Match` names an old version,
413 a body over CONSOLE_MAX_BODY_BYTES (common/limits.py), 428 `If-Match` missing on a write that needs it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import ProtectedError
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import exception_handler as drf_exception_handler

from common import requestid
from common.exceptions import ConcurrentUpdate
from common.fields import SERIALIZER_FIELD_MAPPING, plain_errors
from common.parsing import is_digits


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The resource changed since you read it (If-Match does not match its ETag): nothing was saved."
    default_code = "precondition_failed"


class PreconditionRequired(exceptions.APIException):
    status_code = 428
    default_detail = "Send If-Match with the ETag from your last GET, so that a concurrent change is not overwritten."
    default_code = "precondition_required"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


def _django_errors(exc: DjangoValidationError) -> dict[str, list[str]]:
    exc = plain_errors(exc)
    if hasattr(exc, "error_dict"):
        return {("non_field_errors" if f == "__all__" else f): msgs for f, msgs in exc.message_dict.items()}
    return {"non_field_errors": list(exc.messages)}


def _first_message(errors: Any, prefix: str = "") -> str:
    """'field: rule' of the first error, for the one-line `detail`."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            label = key if key != "non_field_errors" else ""
            found = _first_message(value, f"{prefix}.{label}" if prefix and label else (label or prefix))
            if found:
                return found
        return ""
    if isinstance(errors, list):
        for index, value in enumerate(errors):
            found = _first_message(value, prefix if not isinstance(value, (dict, list)) else f"{prefix}[{index}]")
            if found:
                return found
        return ""
    return f"{prefix}: {errors}" if prefix else str(errors)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Every error of the API in its one format, with the request's id (common/requestid.py). An
    unexpected exception returns None: DRF raises it again, Django logs it with its traceback and
    answers with `handler500` (common/errors.py), the same JSON format under /api/."""
    response = _handled(exc, context)
    if response is not None and isinstance(response.data, dict):
        request = context.get("request")
        response.data["request_id"] = requestid.of(request) if request is not None else requestid.current()
    return response


def _handled(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(_django_errors(exc))
    elif isinstance(exc, ConcurrentUpdate):
        response = Response({"detail": str(exc), "current_version": exc.current_version}, status=status.HTTP_409_CONFLICT)
        return response
    elif isinstance(exc, ProtectedError):
        exc = Conflict(f"Still in use: {exc.args[0]}" if exc.args else None)
    elif isinstance(exc, IntegrityError):
        # A unique constraint raced past validation (two writes at once): refuse, keep what is stored.
        exc = Conflict("A concurrent change conflicts with this one (a name or row already exists). Reload and retry.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = response.data if isinstance(response.data, dict) else {"non_field_errors": response.data}
        message = _first_message(errors) or "Invalid input."
        response.data = {"detail": f"Invalid input: {message}", "errors": errors}
    return response


class ModelSerializer(serializers.ModelSerializer):
    """The console's ModelSerializer: dates and numbers of its models read by the strict fields
    (common/fields.py: ASCII digits, ISO dates, finite numbers)."""

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping, **SERIALIZER_FIELD_MAPPING}


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class RestrictedQuerysetMixin:
    """Every object an API view touches comes through `restrict(user, "view")`: what a user may not
    see does not exist for them (404), whatever the id; writes are then checked by the services (403)."""

    # Ids are 64-bit integers: anything else in the URL is a 404 from the router, never a database error.
    lookup_value_regex = r"[0-9]{1,18}"

    def base_queryset(self):
        raise NotImplementedError

    def get_queryset(self):
        return self.base_queryset().restrict(self.request.user, "view")


class RestrictedPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField):
    """A reference to another object by id, limited to what the requesting user may see."""

    def __init__(self, *, model, **kwargs):
        self.restricted_model = model
        kwargs.setdefault("queryset", model.objects.all())
        super().__init__(**kwargs)

    def get_queryset(self):
        request = self.context.get("request")
        return self.restricted_model.objects.restrict(getattr(request, "user", None), "view")

    def to_internal_value(self, data):
        # JSON numbers past 64 bits arrive as floats (orjson): an id is a whole number that fits, or it is unknown.
        if isinstance(data, float):
            if not data.is_integer() or not -(2**63) <= data < 2**63:
                self.fail("does_not_exist", pk_value=data)
            data = int(data)
        # Beyond 64 bits the database cannot even be asked: the same answer as any unknown id.
        if isinstance(data, int) and not isinstance(data, bool) and not -(2**63) <= data < 2**63:
            self.fail("does_not_exist", pk_value=data)
        if isinstance(data, str) and is_digits(data.strip().lstrip("-")) and not -(2**63) <= int(data) < 2**63:
            self.fail("does_not_exist", pk_value=data)
        # An id is written in the digits 0-9 (the database would read "２" as 2).
        if isinstance(data, str) and data.strip() and not is_digits(data.strip().lstrip("-")):
            self.fail("incorrect_type", data_type="text")
        return super().to_internal_value(data)


class DocumentField(serializers.JSONField):
    """A JSON value, or JSON/YAML text (a form-encoded body sends text): the text is handed as is to the
    services, which parse documents with bounds (common/parsing.py). DRF's JSONField would json.loads form
    text itself, without a depth limit."""

    def to_internal_value(self, data):
        if getattr(data, "is_json_string", False):
            return str(data)
        return super().to_internal_value(data)


def etag_of(rows: Iterable[tuple[Any, Any]]) -> str:
    """A strong ETag for a set of (id, version) pairs."""
    text = ",".join(f"{pk}:{version}" for pk, version in sorted(rows))
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:24] + '"'


def if_match_required(request, current_etag: str) -> None:
    """412 when If-Match names another version, 428 when it is missing."""
    header = request.headers.get("If-Match")
    if not header:
        raise PreconditionRequired()
    candidates = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    if "*" not in candidates and current_etag not in candidates:
        raise PreconditionFailed()


class Router(SimpleRouter):
    """Routes answer with or without the trailing slash (`/api/v1/projects/1/quotas` as well as `.../quotas/`)."""

    def __init__(self):
        super().__init__()
        self.trailing_slash = "/?"


ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "detail": {"type": "string", "description": "One sentence: what went wrong (first field and rule, for 400)."},
        "errors": {"type": "object", "additionalProperties": True,
                   "description": "Invalid input only: field name -> list of the rules it broke (nested for lists)."},
        "current_version": {"type": "integer", "nullable": True},
        "request_id": {"type": "string", "description": "The request's id (also its X-Request-ID header and its "
                                                        "log lines): quote it when reporting an error."},
    },
    "required": ["detail"],
}
_ERROR_MEANINGS = {
    "400": "Invalid input: `errors` names each field and the rule it broke.",
    "401": "Not authenticated: log in, or send `Authorization: Bearer <token>`.",
    "403": "Your role does not allow this (or the CSRF token is missing on a session write).",
    "404": "No such object that you may see (or no such page of a list).",
    "409": "Conflicts with a concurrent change; nothing was saved.",
    "413": "The request body is larger than CONSOLE_MAX_BODY_BYTES (1 MiB by default); nothing was read or stored.",
    "500": "The server failed to answer (logged with its traceback under `request_id`); nothing was stored.",
}


def document_error_responses(result, generator, request, public):
    """drf-spectacular post-processing hook: every operation documents the JSON error responses."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            codes = ["400", "401", "403", "404"]  # 404 also for a page number past the end of a list
            if method in ("post", "put", "patch", "delete"):
                codes.append("409")
            if method in ("post", "put", "patch"):
                codes.append("413")
            for code in codes + [c for c in ("412", "428") if c in operation["responses"]]:
                response = operation["responses"].setdefault(code, {"description": _ERROR_MEANINGS.get(code, "")})
                response.setdefault("content", {"application/json": {"schema": ref}})
    return result
