"""List paging with ``limit`` and ``continue``, as kube-apiserver's etcd list path does it.

A 1.23 server pages whenever ``limit`` is set and the list is not served from the watch cache
(``resourceVersion`` other than ``"0"``): at most ``limit`` items, a ``continue`` token naming the
next key and, without selectors, ``remainingItemCount``. kubectl (``limit=500``) follows the tokens;
a client that ignores them silently misses nodes on a big cluster - kubesim must not hide that.
The token has the real shape (base64 JSON ``{"v","rv","start"}``). kubesim keeps no MVCC snapshot,
so later pages show current objects (keys after the token) under the first page's resourceVersion.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from . import errors
from .watch import StoredObject


@dataclass
class Page:
    items: list[StoredObject]
    rv: int
    continue_token: str = ""
    remaining: int | None = None


def _relative_key(stored: StoredObject, namespaced: bool) -> str:
    return f"{stored.namespace}/{stored.name}" if namespaced else stored.name


def _encode(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("unsupported version")
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


def paginate(
    items: list[StoredObject], query: dict[str, str], current_rv: int, *, namespaced: bool, filtered: bool
) -> Page:
    """``items`` sorted by key and already filtered by the selectors."""
    token, rv_param = query.get("continue", ""), query.get("resourceVersion", "")
    limit = _limit(query.get("limit"))
    if token:
        if rv_param:
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        list_rv, start = _decode(token)
        items = [s for s in items if _relative_key(s, namespaced) >= start]
    elif limit <= 0 or rv_param == "0":
        return Page(items, current_rv)  # served whole, as from the watch cache
    else:
        list_rv = current_rv
    if limit <= 0 or len(items) <= limit:
        return Page(items, list_rv)
    page, rest = items[:limit], items[limit:]
    next_token = _encode(list_rv, _relative_key(page[-1], namespaced) + "\x00")
    return Page(page, list_rv, next_token, None if filtered else len(rest))


def _limit(value: str | None) -> int:
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        raise errors.bad_request(f"invalid limit: {value}") from None
