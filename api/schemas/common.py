"""What every resource's schemas share: the base of request bodies (unknown fields, NaN,
booleans and NUL refused), times in UTC, bounded integers, node names, and the bodies of
errors and health probes."""

import re
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from interstice.wire import EARLIEST_TIME, LATEST_TIME

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _iso_text(value: Any) -> Any:
    # pydantic would read a number (or a string of one) as epoch seconds: the schema says
    # an ISO 8601 string, and a clock's seconds sent by mistake must not pass as a time
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError(
            "Input should be an ISO 8601 time such as 2026-01-01T00:00:00Z, not a number "
            "(epoch seconds are not read)"
        )
    return value


def _utc_in_range(at: datetime) -> datetime:
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at
    # compared as instants, so the offset counts (2100-12-31T23:00-05:00 is 2101 in UTC);
    # converted only once in range (astimezone overflows at the ends of year 1 and 9999)
    if not EARLIEST_TIME <= at < LATEST_TIME:
        raise ValueError(f"{at.isoformat()} is outside the years 2000..2100 in UTC")
    return at.astimezone(UTC)


UTCTime = Annotated[
    datetime,
    BeforeValidator(_iso_text),
    AfterValidator(_utc_in_range),
    Field(
        description="ISO 8601 time (a string; a number is refused, not read as epoch "
        "seconds); without an offset it is UTC; years 2000..2100 in UTC",
        json_schema_extra={"pattern": "^(20[0-9][0-9]|2100)-"},
    ),
]
"""A time in UTC (a time without offset is read as UTC), years 2000..2100 in UTC; given as
an ISO 8601 string (or a :class:`~datetime.datetime`), never as a number."""


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("Input should be a valid integer, not a boolean")
    return value


def integer(ge: int, le: int) -> Any:
    """An integer in [ge, le]: ``true``/``false`` are refused (pydantic would read them as
    1/0), and so is a number with a fractional part (``1.5``, ``5e-324``); ``1e6`` is read
    as 1000000. (The bounds sit before the validator so that OpenAPI shows them.)"""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_not_a_boolean)]


def integer_or_auto(ge: int, le: int) -> Any:
    """``"auto"`` or an :func:`integer` in [ge, le], refused with one error in words (pydantic
    reports one error per member of the union, each named by its inner validators, such as
    ``function-before[_not_a_boolean(), constrained-int]``)."""
    words = f"Input should be 'auto' or an integer from {ge} to {le}"

    def one_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("int_or_auto", words) from None

    return Annotated[integer(ge, le) | Literal["auto"], WrapValidator(one_error)]


NAME_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
"""A node's name (and an agent's ``node``): letters, digits, ``_ . : -``."""
NAME = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)


def _takes_booleans(annotation: Any) -> bool:
    """Whether ``annotation`` has ``bool`` or a model (which checks its own fields) in it."""
    if annotation is bool or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return True
    return any(_takes_booleans(arg) for arg in get_args(annotation))


def _only_booleans(annotation: Any) -> bool:
    """Whether ``annotation`` is ``bool`` or ``bool | None``."""
    return annotation is bool or set(get_args(annotation)) == {bool, type(None)}


def _has_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_has_boolean(v) for v in value.values())
    return isinstance(value, list) and any(_has_boolean(v) for v in value)


def nul_position(value: Any) -> str | None:
    """Where the first NUL character (U+0000) of ``value`` is: ``position 3`` in a string,
    ``item 1, position 0`` in a list, ``the value of 'A', position 2`` or ``a key, position
    0`` in a mapping (nested as deep as the value is); None when it has none. Other values
    (numbers, models, which check their own fields) have none."""
    if isinstance(value, str):
        at = value.find("\x00")
        return None if at < 0 else f"position {at}"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (inner := nul_position(item)) is not None:
                return f"item {index}, {inner}"
    if isinstance(value, dict):
        for key, item in value.items():
            if (inner := nul_position(key)) is not None:
                return f"a key, {inner}"
            if (inner := nul_position(item)) is not None:
                return f"the value of {key!r}, {inner}"
    return None


def refuse_nul(value: Any) -> None:
    """Refuse text holding a NUL character: PostgreSQL cannot store one in a text column
    (the insert fails, a 500), and no process can receive one in an argument or an
    environment variable.

    Raises:
        ValueError: ``value`` (a string, or a list or mapping of them) holds a NUL; the
            message says where (:func:`nul_position`).
    """
    where = nul_position(value)
    if where is not None:
        raise ValueError(f"a NUL character (U+0000) is not allowed ({where})")


NO_NUL_PATTERN = "^[^\\u0000]*$"
"""The pattern a request schema shows on its free text (what :meth:`Request._no_nul`
refuses); fields with a pattern of their own already leave NUL out."""


def _show_no_nul(schema: dict[str, Any], key_names: bool = False) -> None:
    """Add :data:`NO_NUL_PATTERN` to every free-text string of ``schema`` (in place): strings
    with no pattern, enumeration or format, in properties, items, keys (``key_names``: the
    schema of a mapping's keys, strings whether it says so or not), values and branches (a
    nested model is a ``$ref`` that states its own)."""
    text = key_names or schema.get("type") == "string"
    if text and not {"pattern", "enum", "const", "format"} & set(schema):
        schema["pattern"] = NO_NUL_PATTERN
    for key in ("items", "additionalProperties", "propertyNames"):
        if isinstance(schema.get(key), dict):
            _show_no_nul(schema[key], key_names=key == "propertyNames")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for branch in schema.get(key, []):
            _show_no_nul(branch)
    for field in schema.get("properties", {}).values():
        _show_no_nul(field)


def not_together(**fields: dict[str, Any]) -> Any:
    """A model's ``__get_pydantic_json_schema__`` that states, as JSON Schema's ``not``, a
    rule its validators keep: ``fields`` may not all hold a value of their given schema at
    once (e.g. ``entrypoint={"type": "string"}, command={"type": "array"}``: not both, while
    either may be null or left out), so that generated valid bodies keep the rule too."""

    def state(
        cls: type[BaseModel], core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler.resolve_ref_schema(handler(core_schema))
        schema["not"] = {"required": list(fields), "properties": fields}
        return schema

    return classmethod(state)


class Request(BaseModel):
    """Request bodies refuse unknown fields, so a typo is a 422 naming it, NaN or infinite
    numbers (a 422 naming the field, never a 500), ``true``/``false`` where no boolean is
    expected (pydantic would read them as 1 and 0: ``grace_s: false`` is not 0), anything
    but ``true``/``false`` where one is (not ``0``, ``1`` or ``"yes"``), and a NUL character
    (U+0000) in any text: a field, a list item, a key or a value of a mapping (a 422 naming
    the field and where in it, on SQLite as on PostgreSQL, which cannot store one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_show_no_nul)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        refuse_nul(value)
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _strict_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        rules = _boolean_rules(cls, info.field_name or "")
        if rules is None:
            return value
        refused_kind, only_booleans = rules
        if refused_kind is not None and _has_boolean(value):
            raise ValueError(f"Input should be a valid {refused_kind}, not a boolean")
        if only_booleans and value is not None and not isinstance(value, bool):
            raise ValueError("Input should be true or false")
        return value


@cache
def _boolean_rules(model: type[BaseModel], name: str) -> tuple[str | None, bool] | None:
    """What :meth:`Request._strict_booleans` checks of field ``name`` of ``model``, worked
    out once per field (a batch of 10,000 node events checks 50,000 fields): the kind
    (``integer``/``number``) named when a boolean is refused (None: booleans are taken), and
    whether only booleans are. None: no such field."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    annotation = field.annotation
    refused_kind = None
    if not _takes_booleans(annotation):
        refused_kind = "integer" if int in get_args(annotation) + (annotation,) else "number"
    return refused_kind, _only_booleans(annotation)


class ErrorDetail(BaseModel):
    """A 4xx answer: ``detail`` is one line naming the field, id or state at fault."""

    detail: str


class Health(BaseModel):
    status: Literal["ok"]
    leader: bool | None = Field(
        default=None,
        description="Whether this replica leads (runs the solver); on /readyz only",
    )
