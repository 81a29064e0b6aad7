"""Fast JSON (orjson) with the stdlib as a fallback; objects are cached as bytes once per write."""

from __future__ import annotations

from typing import Any

try:
    import orjson

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    def loads(data: bytes | str) -> Any:
        return orjson.loads(data)

    JSONDecodeError: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson ships with the project's dependencies
    import json

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    JSONDecodeError = json.JSONDecodeError
