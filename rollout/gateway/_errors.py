"""The one place where SDK and transport exceptions become our errors.

Every API attempt runs inside :func:`translated`; whatever the ``kubernetes`` client or urllib3
raise leaves it as a :mod:`rollout.errors` class, chained with ``raise ... from`` so the original
stays in the traceback. Callers (and the retry policy) never see ``ApiException``.

Attributes set on every translated error: ``status`` (HTTP code; 0 = no response),
``reason`` (the Status ``reason``, e.g. ``AlreadyExists``; ``Timeout`` or ``ConnectionError``
when there was no response), ``retry_after`` (seconds or None)
and ``what`` (the operation, e.g. ``patch node/n1``).

A 403 becomes :class:`~rollout.errors.ForbiddenError` with ONE line that says which permission
is missing, read off the API server's own Status message (``User "U" cannot VERB resource "R"
in API group "G" in the namespace "NS"``): an operator fixes RBAC from that line alone, without
reading the audit log or guessing which of the rollout's calls was refused.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
from typing import Any, Iterator

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from rollout.errors import (
    ConflictError,
    ForbiddenError,
    GatewayError,
    NotFoundError,
    TransientGatewayError,
)

from ._retry import is_retryable_status, parse_retry_after

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,  # MaxRetryError, ProtocolError, timeouts, SSLError, ...
    ConnectionError,
    socket.timeout,
    TimeoutError,
)


def _status_body(exc: ApiException) -> dict[str, Any]:
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body.startswith("{"):
        try:
            parsed = json.loads(body)
            return parsed if isinstance(parsed, dict) else {}
        except ValueError:
            return {}
    return {}


def _decorate(err: GatewayError, *, status: int, reason: str, retry_after: float | None,
              what: str) -> GatewayError:
    # set as attributes so this works whatever constructor rollout.errors gives the classes
    err.status = status  # type: ignore[attr-defined]
    err.reason = reason  # type: ignore[attr-defined]
    err.retry_after = retry_after  # type: ignore[attr-defined]
    err.what = what  # type: ignore[attr-defined]
    return err


# What a Node,RBAC API server says when it refuses (kube-apiserver's forbidden message): a
# resource request names verb, resource[/subresource], API group and scope; a non-resource
# request names the path.
_DENIED_RESOURCE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]*)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]*)"| at the cluster scope)?')
_DENIED_PATH = re.compile(r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) path "(?P<path>[^"]*)"')


def _one_line(text: str) -> str:
    return " ".join(text.split())


def forbidden_error(message: str, *, what: str) -> ForbiddenError:
    """The missing permission, in one line: who may not do which verb on what, and where.

    ``what`` is our operation (``patch node/n1``); the rest comes from the Status message, so the
    line names exactly the rule the API server looked for. A message in another shape (an
    admission plugin's 403) is quoted as it is.
    """
    hint = ForbiddenError.advice
    found = _DENIED_RESOURCE.search(message)
    if found:
        group = found.group("group") or ""
        resource = found.group("resource") + (f".{group}" if group else "")
        namespace = found.group("namespace") or ""
        scope = f"in namespace {namespace}" if namespace else "cluster-wide"
        text = (f"{what}: forbidden: {found.group('user')} cannot {found.group('verb')} {resource} "
                f"({scope}); {hint}")
        return ForbiddenError(_one_line(text), user=found.group("user"), verb=found.group("verb"),
                              resource=resource, namespace=namespace)
    path = _DENIED_PATH.search(message)
    if path:
        text = f"{what}: forbidden: {path.group('user')} cannot {path.group('verb')} {path.group('path')}; {hint}"
        return ForbiddenError(_one_line(text), user=path.group("user"), verb=path.group("verb"),
                              resource=path.group("path"))
    return ForbiddenError(_one_line(f"{what}: forbidden: {message}; {hint}"))


def translate_api_exception(exc: ApiException, *, what: str) -> GatewayError:
    """Map an ``ApiException`` to the matching :mod:`rollout.errors` class."""
    status = int(exc.status or 0)
    body = _status_body(exc)
    reason = str(body.get("reason") or exc.reason or "")
    message = str(body.get("message") or exc.reason or "no response")
    headers = exc.headers or {}
    retry_after = parse_retry_after(headers.get("Retry-After")) if headers else None
    text = f"{what}: HTTP {status} {reason}: {message}" if status else f"{what}: {message}"
    if status == 403:
        return _decorate(forbidden_error(message, what=what), status=status, reason=reason,
                         retry_after=retry_after, what=what)
    cls: type[GatewayError]
    if is_retryable_status(status):
        cls = TransientGatewayError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    else:
        cls = GatewayError
    return _decorate(cls(text), status=status, reason=reason, retry_after=retry_after, what=what)


def translate_transport_error(exc: BaseException, *, what: str) -> GatewayError:
    """A request that got no HTTP answer (refused, reset, timed out): always transient. Reason
    ``Timeout`` when the connection stayed silent past its timeout, else ``ConnectionError``."""
    text = f"{what}: no response from the API server: {type(exc).__name__}: {exc}"
    silent = isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError))
    return _decorate(TransientGatewayError(text), status=0,
                     reason="Timeout" if silent else "ConnectionError", retry_after=None, what=what)


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a block of SDK calls; re-raise anything they raise as one of our errors."""
    try:
        yield
    except ApiException as exc:
        raise translate_api_exception(exc, what=what) from exc
    except TRANSPORT_ERRORS as exc:
        raise translate_transport_error(exc, what=what) from exc
