"""What a host call's body must hold, read as the API's serializers read it (a JSON number,
never a string or a boolean): the heartbeat's fields (`heartbeat_fields`, which raises ValueError
with the caller's message) and the job calls' bodies (`lease_options`, `completion_options`,
`completions_options`, `failure_reason`, which raise Malformed with the 400 DRF's serializers
would answer). benchmarks/network/host_protocol.py answers with them.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from rest_framework import serializers
from rest_framework.settings import api_settings

from benchmarks import policy
from benchmarks.network import hosts, jobs
from common import parsers

MAX_RESULT_BYTES = 1_000_000  # a completion's `result`, as JSON


def heartbeat_fields(raw: bytes) -> dict:
    """The heartbeat's fields, checked as strictly as the API's serializers check numbers (a
    JSON number, never a string or a boolean); raises ValueError with a message for the caller."""
    data = parsers.loads(raw or b"null")  # the API parser's rules; UnacceptableJSON is a ValueError
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    models = data.get("models")
    if not isinstance(models, list) or len(models) > 64 or not all(
            isinstance(m, str) and 0 < len(m.strip()) <= 64 for m in models):
        raise ValueError("models: a list of at most 64 catalog ids")
    hardware = data.get("hardware", {})
    if not isinstance(hardware, dict):
        raise ValueError("hardware: expected an object")
    checked = {}
    for name, kind in hosts.HARDWARE_FIELDS.items():
        if name not in hardware:
            continue
        value = hardware[name]
        if kind is str and not (isinstance(value, str) and len(value.strip()) <= 100):
            raise ValueError(f"hardware.{name}: at most 100 characters")
        if kind is int and not _whole(value, 0, 2**31 - 1):
            raise ValueError(f"hardware.{name}: a whole number from 0 to {2**31 - 1}")
        checked[name] = value.strip() if kind is str else int(value)
    slots = data.get("slots", 1)
    limit = policy.value("NETWORK_MAX_SLOTS")
    if not _whole(slots, 1, limit):
        raise ValueError(f"slots: a whole number from 1 to {limit}")
    return {"models": [m.strip() for m in models], "hardware": checked, "slots": int(slots)}


def _whole(value, low: int, high: int) -> bool:
    """A JSON number that is whole and within [low, high] (never a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and low <= value <= high


# What the URL's <uuid:job_id> accepts (Django's UUID converter).
JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# --- the job calls' bodies ---------------------------------------------------------------------
# Each body is a table of fields (below), read as the DRF serializer of the same fields reads it
# (host_api.py declares those for the API schema, with these limits): the same values accepted,
# and for anything else the same errors, in DRF's words (its fields' own error messages).
# tests/benchmarks/network/test_job_bodies.py holds each table to its serializer.


class Malformed(ValueError):
    """A body its call refuses: `detail` is the 400's body, as DRF's ValidationError renders."""

    def __init__(self, detail: dict | list) -> None:
        super().__init__(detail)
        self.detail = detail


class _Refused(Exception):
    def __init__(self, detail: list | dict) -> None:
        self.detail = detail


_ABSENT = object()


def _says(field: type[serializers.Field] | type[serializers.ListSerializer], code: str,
          **values) -> str:
    """DRF's message for `code`, as that field class words it."""
    return str(field.default_error_messages[code]).format(**values)


@dataclass(frozen=True)
class Field:
    """One field of a body: `read` gives its value or raises _Refused; `required`, `default`
    and `null` as DRF's Field takes them."""

    read: Callable[[object], object]
    required: bool = False
    default: object = _ABSENT
    null: bool = False


def number(low: float | None = None, high: float | None = None) -> Callable[[object], float]:
    """A finite JSON number, never a string or a boolean (api_shared.StrictFloatField)."""
    def read(value: object) -> float:
        if not _number(value, -math.inf):
            raise _Refused([_says(serializers.FloatField, "invalid")])
        return _within(float(value), low, high, serializers.FloatField)  # type: ignore[arg-type]
    return read


def whole(low: int | None = None) -> Callable[[object], int]:
    """A whole JSON number, never a string or a boolean (api_shared.StrictIntegerField)."""
    def read(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                isinstance(value, float) and not value.is_integer()):
            raise _Refused([_says(serializers.IntegerField, "invalid")])
        return _within(int(value), low, None, serializers.IntegerField)
    return read


def _within(value, low, high, field):
    # Both bounds are checked, as DRF runs every validator and lists each failure.
    errors = ([_says(field, "max_value", max_value=high)] if high is not None and value > high
              else []) + ([_says(field, "min_value", min_value=low)]
                          if low is not None and value < low else [])
    if errors:
        raise _Refused(errors)
    return value


def boolean(value: object) -> bool:
    """What DRF's BooleanField takes for true and false ("yes", 1, "false", …)."""
    try:
        if value in serializers.BooleanField.TRUE_VALUES:
            return True
        if value in serializers.BooleanField.FALSE_VALUES:
            return False
    except TypeError:  # a list or an object: not hashable, not a boolean
        pass
    raise _Refused([_says(serializers.BooleanField, "invalid")])


def text(max_length: int) -> Callable[[object], str]:
    """DRF's CharField: a string or a number, trimmed, not blank. (NUL and lone surrogates,
    which it also refuses, never get here: the JSON parser refused them.)"""
    def read(value: object) -> str:
        if value == "" or str(value).strip() == "":
            raise _Refused([_says(serializers.CharField, "blank")])
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _Refused([_says(serializers.CharField, "invalid")])
        trimmed = str(value).strip()
        if len(trimmed) > max_length:
            raise _Refused([_says(serializers.CharField, "max_length", max_length=max_length)])
        return trimmed
    return read


def job_id(value: object) -> uuid.UUID:
    """DRF's UUIDField: any form uuid.UUID reads, or an integer."""
    try:
        if isinstance(value, int):
            return uuid.UUID(int=value)
        if isinstance(value, str):
            return uuid.UUID(hex=value)
    except ValueError:
        pass
    raise _Refused([_says(serializers.UUIDField, "invalid")])


def result(value: object) -> object:
    """Any JSON, at most MAX_RESULT_BYTES of it."""
    if len(json.dumps(value)) > MAX_RESULT_BYTES:
        raise _Refused([f"at most {MAX_RESULT_BYTES} bytes"])
    return value


def items(fields: dict[str, Field], most: int) -> Callable[[object], list[dict]]:
    """A non-empty list of at most `most` objects, each read as `fields` (DRF's ListSerializer
    of a serializer: each refused item's errors under its index)."""
    def read(value: object) -> list[dict]:
        key = api_settings.NON_FIELD_ERRORS_KEY
        if not isinstance(value, list):
            raise _Refused({key: [_says(serializers.ListSerializer, "not_a_list",
                                        input_type=type(value).__name__)]})
        if not value:
            raise _Refused({key: [_says(serializers.ListSerializer, "empty")]})
        if len(value) > most:
            raise _Refused({key: [_says(serializers.ListSerializer, "max_length",
                                        max_length=most)]})
        read_items, errors = [], {}
        for index, item in enumerate(value):
            try:
                read_items.append(_read_object(fields, item))
            except _Refused as exc:
                errors[index] = exc.detail
        if errors:
            raise _Refused(errors if api_settings.LIST_SERIALIZER_ERRORS_AS_DICT
                           else [errors.get(index, {}) for index in range(len(value))])
        return read_items
    return read


def read(fields: dict[str, Field], data: object) -> dict:
    """A body's values by field, defaults filled in; raises Malformed as DRF would refuse it."""
    try:
        return _read_object(fields, data)
    except _Refused as exc:
        if data is None:  # DRF's serializer words a null body apart
            raise Malformed({api_settings.NON_FIELD_ERRORS_KEY: ["No data provided"]}) from None
        raise Malformed(exc.detail) from None


def _read_object(fields: dict[str, Field], data: object) -> dict:
    if data is None:
        raise _Refused([_says(serializers.Field, "null")])
    if not isinstance(data, dict):
        raise _Refused({api_settings.NON_FIELD_ERRORS_KEY: [_says(
            serializers.Serializer, "invalid", datatype=type(data).__name__)]})
    values: dict = {}
    errors: dict[str, list | dict] = {}
    for name, field in fields.items():
        value = data.get(name, _ABSENT)
        if value is _ABSENT:
            if field.required:
                errors[name] = [_says(serializers.Field, "required")]
            elif field.default is not _ABSENT:
                values[name] = field.default
        elif value is None:
            if field.null:
                values[name] = None
            else:
                errors[name] = [_says(serializers.Field, "null")]
        else:
            try:
                values[name] = field.read(value)
            except _Refused as exc:
                errors[name] = exc.detail
    if errors:
        raise _Refused(errors)
    return values


WAIT_MAX_S = policy.DEFAULTS["NETWORK_LEASE_WAIT_MAX_S"]  # the schema's bound; the policy's applies
MAX_REPORTS = policy.DEFAULTS["NETWORK_MAX_SLOTS"]  # reports in one POST /v1/jobs/complete

FIGURES = {"ttft_ms": Field(number(low=0), required=True, null=True),
           "completion_tokens": Field(whole(low=0), required=True),
           "elapsed_ms": Field(number(low=0), required=True),
           "result": Field(result, null=True)}
LEASE = {"start": Field(boolean, default=False),
         "wait_s": Field(number(low=0, high=WAIT_MAX_S), default=0.0)}
COMPLETE = {**FIGURES, "lease_next": Field(boolean, default=False),
            "wait_s": Field(number(low=0, high=WAIT_MAX_S), default=0.0)}
COMPLETION = {**FIGURES, "id": Field(job_id, required=True)}
COMPLETE_MANY = {"jobs": Field(items(COMPLETION, MAX_REPORTS), required=True),
                 "lease_next": Field(boolean, default=False)}
REASON_MAX_LENGTH = 190  # a host's failure reason, as the job keeps it
FAIL = {"reason": Field(text(REASON_MAX_LENGTH), required=True)}


@dataclass(frozen=True)
class Completion:
    figures: jobs.Figures
    result: object
    lease_next: bool
    wait_s: float


@dataclass(frozen=True)
class LeaseOptions:
    start: bool
    wait_s: float


def lease_options(data: object) -> LeaseOptions:
    """A lease body (parsed JSON; {} for a bare POST); anything but an object asks for
    nothing, as the view always read it. Raises Malformed."""
    values = read(LEASE, data if isinstance(data, dict) else {})
    return LeaseOptions(values["start"], _wait_s(values))


def completion_options(data: object) -> Completion:
    """A /complete body. Raises Malformed."""
    values = read(COMPLETE, data)
    return Completion(_figures(values), values.get("result"), values["lease_next"],
                      _wait_s(values))


def completions_options(data: object) -> tuple[list[tuple[uuid.UUID, jobs.Figures, object]],
                                               bool]:
    """A POST /v1/jobs/complete body: (reports, lease_next). Raises Malformed."""
    values = read(COMPLETE_MANY, data)
    return ([(item["id"], _figures(item), item.get("result")) for item in values["jobs"]],
            values["lease_next"])


def failure_reason(data: object) -> str:
    """A /fail body's reason. Raises Malformed."""
    return read(FAIL, data)["reason"]


def _figures(values: dict) -> jobs.Figures:
    return jobs.Figures(ttft_ms=values["ttft_ms"], completion_tokens=values["completion_tokens"],
                        elapsed_ms=values["elapsed_ms"])


def _wait_s(values: dict) -> float:
    return min(values["wait_s"], policy.value("NETWORK_LEASE_WAIT_MAX_S"))


def _number(value: object, low: float, high: float = math.inf) -> bool:
    """A finite JSON number (never a boolean) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return False
    return math.isfinite(number) and low <= number <= high
