"""Errors answered as Kubernetes ``Status`` objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubesim.util import Obj

EXPIRED_CONTINUE_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results. Continuing with the "
    "provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may "
    "show up in the list."
)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answered as a Kubernetes ``Status`` object (also raised by the Python API)."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "InternalError")
        self.details = dict(details) if details else None
        self.retry_after = retry_after

    def status(self) -> Obj:
        """The ``Status`` body the real API server would send."""
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def _not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', "NotFound", details={"name": name, "kind": resource})


def _already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409, f'{resource} "{name}" already exists', "AlreadyExists", details={"name": name, "kind": resource}
    )


def _conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        details={"name": name, "kind": resource},
    )


def _expired_continue() -> ApiError:
    return ApiError(410, EXPIRED_CONTINUE_MESSAGE, "Expired")




def _invalid(kind: str, name: str, causes: list[Any], group: str = "") -> ApiError:
    """422 Invalid naming every field, like the API server's field.ErrorList (causes: schema.Cause)."""
    parts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: Obj = {"name": name, "kind": kind.split(".")[0], "causes": [c.as_dict() for c in causes]}
    if group:
        details["group"] = group
    return ApiError(422, f'{kind} "{name}" is invalid: {summary}', "Invalid", details=details)
