"""A pydantic model of KubeletConfiguration v1beta1, generated from the field catalog.

Why generated: the catalog is the one source of field names and types; writing ~110 fields by
hand would drift from it. The model checks what Go's JSON decoder checks (field names, JSON
types, int32/int64 ranges, Go duration strings, resource quantities) and forbids unknown fields
at every level, so a typo fails here instead of being silently dropped by the kubelet's lenient
decode. Semantic rules (ranges, cross-field rules, feature gates) live in ``validate.py``.

Python attribute names are ``f_<jsonName>`` with the JSON name as alias, because some JSON names
(``json``, ``schema``-like words) would shadow ``BaseModel`` attributes.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
)

from rollout.kubeletconfig.catalog import API_VERSION, KIND, FieldSpec, TypeSpec, load_catalog
from rollout.kubeletconfig.values import parse_go_duration, parse_quantity

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_STRICT = ConfigDict(extra="forbid", strict=True, populate_by_name=False, frozen=True)


def _check_duration(value: str) -> str:
    parse_go_duration(value)
    return value


def _check_quantity(value: Any) -> Any:
    parse_quantity(value)
    return value


Duration = Annotated[StrictStr, AfterValidator(_check_duration)]
Quantity = Annotated[StrictStr | StrictInt | StrictFloat, AfterValidator(_check_quantity)]
Int32 = Annotated[StrictInt, Field(ge=_INT32[0], le=_INT32[1])]
Int64 = Annotated[StrictInt, Field(ge=_INT64[0], le=_INT64[1])]
_SCALAR_TYPES: dict[str, Any] = {
    "string": StrictStr,
    "bool": StrictBool,
    "int32": Int32,
    "int64": Int64,
    "float64": Union[StrictInt, StrictFloat],
    "duration": Duration,
    "quantity": Quantity,
}


def python_name(json_name: str) -> str:
    return f"f_{json_name}"


def _annotation(type_: TypeSpec, spec: FieldSpec) -> Any:
    """The Python type for a catalog type; ``object`` items use the spec's subfields."""
    if type_.kind in _SCALAR_TYPES:
        return _SCALAR_TYPES[type_.kind]
    if type_.kind == "map":
        assert type_.key is not None and type_.item is not None
        return dict[_annotation(type_.key, spec), _annotation(type_.item, spec)]  # type: ignore[misc]
    if type_.kind == "list":
        assert type_.item is not None
        return list[_annotation(type_.item, spec)]  # type: ignore[misc]
    return _object_model(spec)


def _object_model(spec: FieldSpec) -> type[BaseModel]:
    fields = {
        python_name(c.name): (Optional[_annotation(c.type, c)], Field(default=None, alias=c.name))
        for c in spec.children
    }
    name = "".join(p[:1].upper() + p[1:] for p in spec.path.split(".")) or "Object"
    return create_model(name, __config__=_STRICT, **fields)  # type: ignore[call-overload,no-any-return]


@functools.cache
def kubelet_configuration_model() -> type[BaseModel]:
    """The KubeletConfiguration model; every field optional (omitted and null mean "default")."""
    fields: dict[str, Any] = {
        python_name(f.name): (Optional[_annotation(f.type, f)], Field(default=None, alias=f.name))
        for f in load_catalog().fields
    }
    fields["f_kind"] = (Optional[StrictStr], Field(default=None, alias="kind"))
    fields["f_apiVersion"] = (Optional[StrictStr], Field(default=None, alias="apiVersion"))
    model = create_model("KubeletConfiguration", __config__=_STRICT, **fields)
    model.__doc__ = f"{KIND} {API_VERSION}, generated from rollout/catalog (unknown fields forbidden)."
    return model  # type: ignore[no-any-return]
