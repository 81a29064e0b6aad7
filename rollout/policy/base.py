"""The strict pydantic base every policy section shares.

Why one base: every section must refuse unknown keys (a typo must not silently fall back to a
default), be immutable once validated (the planner and the decision function trust it), and
accept both the YAML spelling (``maxUnavailable``) and the Python one (``max_unavailable``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class PolicyModel(BaseModel):
    """Frozen, extra=forbid, camelCase aliases with snake_case names accepted too."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )


# The cross-field rules report several problems in one ValueError, one per line.
PROBLEM_SEP = "\n"


_FIELD_NAME = r"[a-z][A-Za-z0-9]*"  # a KubeletConfiguration field's top-level name
_FIELD_PATH = re.compile(rf"^{_FIELD_NAME}(\.[A-Za-z0-9]+)*$")
_TOP_FIELD = re.compile(rf"^{_FIELD_NAME}$")


def _check_field_path(value: str) -> str:
    if _FIELD_PATH.match(value) is None:
        raise ValueError(
            f"a KubeletConfiguration field name like 'cgroupDriver' or 'evictionHard', got {value!r}"
        )
    return value


def _check_top_field(value: str) -> str:
    if _TOP_FIELD.match(value) is None:
        raise ValueError(f"a KubeletConfiguration field by its top-level name, like 'serializeImagePulls' or "
                         f"'evictionHard', got {value!r}")
    return value


FieldPath = Annotated[str, AfterValidator(_check_field_path)]  # a field or a key inside one (allowFields)
FieldName = Annotated[str, AfterValidator(_check_top_field)]  # a top-level field (an analysis check's when)
