"""Kubernetes ``Status`` errors, built the way kube-apiserver builds them.

Clients parse these bodies (kubectl prints ``Error from server (<reason>): <message>``, the Python
client exposes ``ApiException.body``), so reason, message and details follow
``k8s.io/apimachinery/pkg/api/errors`` word for word. One exception type, :class:`ApiError`, is
raised by every layer of the server and by the in-process client alike.
"""

from __future__ import annotations

from typing import Any

_REASON_PHRASES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """An API request failed; ``status`` is the Kubernetes ``Status`` dict sent to the client."""

    def __init__(self, code: int, status: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(f"{code} {status.get('reason', '')}: {status.get('message', '')}")
        self.code = code
        self.status = status
        self.headers = headers or {}

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))


def status_dict(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _error(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(code, status_dict(code, reason, message, details))


def qualified(resource: str, group: str) -> str:
    """``leases.coordination.k8s.io`` for grouped kinds, ``nodes`` for core ones."""
    return f"{resource}.{group}" if group else resource


def _details(resource: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    return _error(404, "NotFound", f'{qualified(resource, group)} "{name}" not found', _details(resource, group, name))


def path_not_found() -> ApiError:
    return _error(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return _error(
        409, "AlreadyExists", f'{qualified(resource, group)} "{name}" already exists', _details(resource, group, name)
    )


def conflict(resource: str, group: str, name: str) -> ApiError:
    message = (
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return _error(409, "Conflict", message, _details(resource, group, name))


def bad_request(message: str) -> ApiError:
    return _error(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return _error(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def unsupported_media_type(accepted: str) -> ApiError:
    message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    return _error(415, "UnsupportedMediaType", message)


def expired(requested: int, oldest: int) -> ApiError:
    return _error(410, "Expired", f"too old resource version: {requested} ({oldest})")


def unauthorized() -> ApiError:
    return _error(401, "Unauthorized", "Unauthorized")


def forbidden(resource: str, group: str, name: str, why: str) -> ApiError:
    """Admission-style 403: ``nodes "n" is forbidden: <why>``."""
    target = qualified(resource, group)
    message = f'{target} "{name}" is forbidden: {why}' if name else f"{target} is forbidden: {why}"
    return _error(403, "Forbidden", message, _details(resource, group, name))


def internal_error(message: str) -> ApiError:
    return _error(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def too_many_requests(retry_after: int) -> ApiError:
    err = _error(
        429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": retry_after}
    )
    err.headers["Retry-After"] = str(retry_after)
    return err


class GoRepr(str):
    """A bad value already rendered the way Go's ``%#v`` prints it (printed verbatim)."""


class FieldError:
    """One validation cause (``field.Error`` in Go)."""

    # field.ErrorType -> (String(), StatusCause reason)
    _TYPES = {
        "Required": ("Required value", "FieldValueRequired"),
        "Forbidden": ("Forbidden", "FieldValueForbidden"),
        "TooLong": ("Too long", "FieldValueTooLong"),
        "Invalid": ("Invalid value", "FieldValueInvalid"),
        "NotSupported": ("Unsupported value", "FieldValueNotSupported"),
        "Duplicate": ("Duplicate value", "FieldValueDuplicate"),
    }
    _NO_VALUE = ("Required", "Forbidden", "TooLong")

    def __init__(self, kind: str, field: str, detail: str, value: Any = None):
        if kind not in self._TYPES:
            raise ValueError(f"unknown field error type {kind!r}")
        self.kind = kind
        self.field = field
        self.detail = detail
        self.value = value

    def message(self) -> str:
        """The part after ``field: ``, as Go's ``field.Error.ErrorBody`` renders it."""
        label = self._TYPES[self.kind][0]
        body = label if self.kind in self._NO_VALUE else f"{label}: {_go_value(self.value)}"
        return f"{body}: {self.detail}" if self.detail else body

    def cause(self) -> dict[str, Any]:
        return {"reason": self._TYPES[self.kind][1], "message": self.message(), "field": self.field}


def _go_value(value: Any) -> str:
    """Render a bad value like ``field.Error`` does: strings %q, simple types %v, else %#v."""
    if isinstance(value, GoRepr):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid; ``details.kind`` is the Kind (kubectl prints ``The Node "n" is invalid``)."""
    rendered = [f"{e.field}: {e.message()}" for e in errors]
    joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [e.cause() for e in errors]
    return _error(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {joined}', details)


def reason_phrase(code: int) -> str:
    return _REASON_PHRASES.get(code, "Unknown")
