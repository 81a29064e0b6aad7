"""Just enough protobuf: decode the create bodies kubectl sends as protobuf.

kubectl 1.32+ POSTs ``create configmap``/``create namespace`` (and ``drain``'s Evictions) as
``application/vnd.kubernetes.protobuf`` with no JSON fallback, and every kubectl POSTs
``auth can-i``'s access reviews and ``create token``'s TokenRequest the same way (a server that
cannot read them answers 415 UnsupportedMediaType), so the server must read the
``k8s\\0`` + ``runtime.Unknown`` envelope and those object messages (field numbers from
k8s.io/api ``generated.proto``). Also a tiny encoder, used to build the OpenAPI v2 document.
"""

from __future__ import annotations

import base64
from typing import Any, Iterator

from . import errors

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """Yield ``(field_number, value)``: ints for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _map_entry(data: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, raw in fields(data):
        if number == 1:
            key = _text(raw)
        elif number == 2 and isinstance(raw, bytes):
            value = raw
    return key, value


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for number, raw in fields(data):
        if number in names and raw:
            meta[names[number]] = _text(raw)
        elif number in (11, 12) and isinstance(raw, bytes):
            key, value = _map_entry(raw)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = value.decode()
        elif number == 14 and raw:
            meta.setdefault("finalizers", []).append(_text(raw))
    return meta


def _config_map(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {}}
    for number, raw in fields(data):
        if number == 1 and isinstance(raw, bytes):
            obj["metadata"] = _object_meta(raw)
        elif number == 2 and isinstance(raw, bytes):
            key, value = _map_entry(raw)
            obj.setdefault("data", {})[key] = value.decode()
        elif number == 3 and isinstance(raw, bytes):
            key, value = _map_entry(raw)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(value).decode()
        elif number == 4:
            obj["immutable"] = bool(raw)
    return obj


def _namespace(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1", "metadata": {}}
    for number, raw in fields(data):
        if not isinstance(raw, bytes):
            continue
        if number == 1:
            obj["metadata"] = _object_meta(raw)
        elif number == 2:
            finalizers = [_text(v) for n, v in fields(raw) if n == 1]
            obj["spec"] = {"finalizers": finalizers} if finalizers else {}
        elif number == 3:
            phase = [_text(v) for n, v in fields(raw) if n == 1]
            obj["status"] = {"phase": phase[0]} if phase else {}
    return obj


def _strings(data: bytes, names: dict[int, str]) -> dict[str, str]:
    """A message of string fields only (numbers -> JSON names); empty strings are omitted."""
    return {names[n]: _text(v) for n, v in fields(data) if n in names and v}


_RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource", 7: "name"}
_NON_RESOURCE_ATTRIBUTES = {1: "path", 2: "verb"}


def _self_subject_access_review(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": {}}
    for number, raw in fields(data):
        if number != 2 or not isinstance(raw, bytes):
            continue
        for sub, value in fields(raw):
            if sub == 1 and isinstance(value, bytes):
                obj["spec"]["resourceAttributes"] = _strings(value, _RESOURCE_ATTRIBUTES)
            elif sub == 2 and isinstance(value, bytes):
                obj["spec"]["nonResourceAttributes"] = _strings(value, _NON_RESOURCE_ATTRIBUTES)
    return obj


def _self_subject_rules_review(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, raw in fields(data):
        if number == 2 and isinstance(raw, bytes):
            spec = _strings(raw, {1: "namespace"})
    return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1", "spec": spec}


def _token_request(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, raw in fields(data):
        if number != 2 or not isinstance(raw, bytes):
            continue
        for sub, value in fields(raw):
            if sub == 1:
                spec.setdefault("audiences", []).append(_text(value))
            elif sub == 4 and isinstance(value, int):
                spec["expirationSeconds"] = value
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": spec}


def _eviction(data: bytes) -> dict[str, Any]:
    """policy/v1 ``Eviction``: metadata and the DeleteOptions fields kubesim reads."""
    obj: dict[str, Any] = {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {}}
    for number, raw in fields(data):
        if number == 1 and isinstance(raw, bytes):
            obj["metadata"] = _object_meta(raw)
        elif number == 2 and isinstance(raw, bytes):
            options: dict[str, Any] = {}
            for sub, value in fields(raw):
                if sub == 1 and isinstance(value, int):
                    options["gracePeriodSeconds"] = value
                elif sub == 5:
                    options.setdefault("dryRun", []).append(_text(value))
            obj["deleteOptions"] = options
    return obj


_DECODERS = {
    "Eviction": _eviction,
    "ConfigMap": _config_map,
    "Namespace": _namespace,
    "SelfSubjectAccessReview": _self_subject_access_review,
    "SelfSubjectRulesReview": _self_subject_rules_review,
    "TokenRequest": _token_request,
}


def decode(body: bytes) -> dict[str, Any]:
    """Decode a ``k8s\\0``-framed ``runtime.Unknown`` into a JSON-shaped dict; 415 if unsupported."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("provided protobuf body is missing the k8s magic prefix")
    kind, raw = "", b""
    try:
        for number, value in fields(body[len(MAGIC) :]):
            if number == 1 and isinstance(value, bytes):
                kind = next((_text(v) for n, v in fields(value) if n == 2), "")
            elif number == 2 and isinstance(value, bytes):
                raw = value
        decoder = _DECODERS.get(kind)
        if decoder is None:
            raise errors.unsupported_media_type("application/json, application/yaml")
        return decoder(raw)
    except ValueError as exc:
        raise errors.bad_request(f"unable to decode protobuf body: {exc}") from None


# --- encoding ----------------------------------------------------------------------------------


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: bytes | str) -> bytes:
    """One length-delimited field."""
    data = value.encode() if isinstance(value, str) else value
    return _encode_varint(number << 3 | 2) + _encode_varint(len(data)) + data


def varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3) + _encode_varint(value)
