"""The API schema says what the API answers.

One mechanism instead of a decorator on every view:

- `ErrorDocumentingSchema` (REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS) adds to every operation
  the error answers it can give, each with its JSON shape (`Error`, or `ValidationError` for
  400): 400 where a request carries a body or query parameters, 401 and 403 where it needs
  credentials (403 on writes, and on reads some roles may not make: `roles_may_not_read`), 404
  where the path names an object (or the body names a team),
  429 with Retry-After on POSTs (the API's rate limits and budgets all guard a POST) and on
  every call that takes credentials (an address over the failed-authentication limit), and
  503 with Retry-After on every operation (the database or the task queue is unreachable, or
  no host serves a model). A view that documents a code itself keeps its own description and
  body; only what it left out (the body, the Retry-After header) is filled in.
- `add_plain_views` (a preprocessing hook) documents plain Django views that the API serves
  without DRF (the host heartbeat: benchmarks/host_wsgi.py answers it before Django).
  Such a view names, in its `openapi_view` attribute, a DRF view that describes it.
- `refuse_nul_in_requests` (a postprocessing hook) states what common/parsers.py
  enforces for every JSON body: no string, and no object key, holds U+0000, at any depth of
  a free-form value (`JsonValue`); a body's object holds its fields and no other member.
- 400 answers a request the schema calls invalid; a request the schema calls valid that names
  what the site cannot use (a catalog id it does not have, a URL the guard or the channel's
  service refuses) is a 422 (`Unprocessable`), one that clashes with what is stored a 409
  (`Conflict`; both in common/errors.py); the operation documents either, and any 4xx it
  describes in words gets the error body's schema.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.generators import EndpointEnumerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent, force_instance
from rest_framework import permissions, serializers

from accounts.validators import validate_one_line

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
BODY_METHODS = {"POST", "PUT", "PATCH"}
API_PREFIXES = ("/api/", "/v1/")
# No U+0000 anywhere in a string (PostgreSQL cannot store it; the parser refuses it with 400).
NO_NUL = "^[^\\u0000]*$"
# accounts/validators.validate_one_line: no control character (Cc), line or paragraph
# separator, or bidirectional control (BIDI_CONTROLS).
ONE_LINE = ("^[^\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029\\u061c\\u200e\\u200f"
            "\\u202a-\\u202e\\u2066-\\u2069]*$")

ERROR = {
    "type": "object",
    "description": "An error. `detail` says what went wrong; `code`, where given, is a "
                   "machine-readable reason (e.g. `rate_limited`). Some answers add fields "
                   "(e.g. `limit`, `window_s`, `unknown_models`).",
    "properties": {
        "detail": {"type": "string"},
        "code": {"type": "string"},
    },
    "required": ["detail"],
}
JSON_VALUE_REF = "#/components/schemas/JsonValue"
# Any JSON the parser takes: no U+0000 in a string or a key, at any depth.
JSON_VALUE = {
    "description": "Any JSON value in which no string, and no object key, holds U+0000.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": ["number", "boolean", "null"]},
        {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
        {"type": "object", "propertyNames": {"pattern": NO_NUL},
         "additionalProperties": {"$ref": JSON_VALUE_REF}},
    ],
}
VALIDATION_ERROR = {
    "type": "object",
    "description": "The request was refused. Each refused field names its messages: a list of "
                   "strings, or for a nested field an object (or a list of objects) of the "
                   "same form. `non_field_errors` concerns the body as a whole; `detail` "
                   "alone means the request could not be read (not JSON, nested too deeply, "
                   "NUL in a string) or a query parameter is refused.",
    "properties": {
        "detail": {"type": "string"},
        "non_field_errors": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": {},
    "minProperties": 1,
}
RETRY_AFTER = {
    "schema": {"type": "integer", "minimum": 0},
    "description": "Seconds to wait before trying again.",
    "required": True,
}
WWW_AUTHENTICATE = {
    "schema": {"type": "string"},
    "description": "The scheme to authenticate with (`Bearer`).",
}

DESCRIPTIONS = {
    "400": "Refused: a field, the body or a query parameter is invalid (see the messages).",
    "401": "No credentials, or malformed, unknown, revoked or expired ones.",
    "403": "The credentials are valid but may not do this (a read-only token or role, a "
           "secret that would move to another origin).",
    "404": "Not found, or not one of the caller's (a foreign object is never revealed).",
    "422": "Refused: the request is well formed but names what this site cannot use (see the "
           "messages); nothing was done.",
    "429": "Too many requests, or a budget is spent; nothing was done. Retry after "
           "`Retry-After` seconds.",
    "503": "Temporarily unavailable (the database or the task queue is unreachable, or no "
           "host serves the model); nothing was done. Retry after `Retry-After` seconds.",
}


RESPONSE_NAMES = {"400": "BadRequest", "401": "Unauthenticated", "403": "Forbidden",
                  "404": "NotFound", "422": "Unprocessable", "429": "TooManyRequests",
                  "503": "Unavailable"}


# A summary for each operation that has none, so Redoc's menu and Swagger's list read as
# words ("List endpoints") instead of operation ids ("api_v1_endpoints_list").
ACTION_SUMMARIES = {"list": "List {plural}", "create": "Create {a} {singular}",
                    "retrieve": "Read {a} {singular}", "update": "Replace {a} {singular}",
                    "partial_update": "Update {a} {singular}", "destroy": "Delete {a} {singular}"}


def operation_summary(method: str, action: str | None, singular: str, plural: str,
                      doc: str | None, path: str = "") -> str:
    """Words for an operation: the standard actions by name, any other by its docstring's
    first clause, else the last word of its path."""
    article = "an" if singular[:1].lower() in "aeiou" else "a"
    if action in ACTION_SUMMARIES:
        return ACTION_SUMMARIES[action].format(a=article, singular=singular, plural=plural)
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    first = re.sub(r"\s*\(issue \d+\)", "", first)
    first = re.split(r"\.\s|: |; | \(", first)[0].rstrip(".").strip()
    if first:
        return first if len(first) <= 80 else first[:79].rsplit(" ", 1)[0] + "…"
    segment = next((part for part in reversed(path.strip("/").split("/"))
                    if part and not part.startswith("{")), plural)
    return segment.replace("_", " ").replace(".", " ").capitalize()


class ErrorDocumentingSchema(AutoSchema):
    def get_summary(self):
        summary = super().get_summary()
        if summary:
            return summary
        model = getattr(getattr(self.view, "queryset", None), "model", None) or getattr(
            self.view, "scoped_model", None)
        singular = str(model._meta.verbose_name) if model is not None else "resource"
        plural = str(model._meta.verbose_name_plural) if model is not None else "resources"
        action = getattr(self.view, "action", None)
        handler = getattr(self.view, action or self.method.lower(), None)
        doc = getattr(handler, "__doc__", None) if handler is not None else None
        if doc is None and action is None:
            doc = self.view.__doc__  # a plain APIView: its class says what its method does
        return operation_summary(self.method, action, singular, plural, doc, self.path)

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        codes = self._error_codes()
        if "422" in responses:  # documented by the view: it can refuse what a body names
            codes.append("422")
        for code in codes:
            if code not in responses:  # the shared answer (components/responses)
                responses[code] = self._shared_response(code)
                continue
            # The view documented this code itself: keep its words, fill in what it left out.
            documented = responses[code]
            documented["description"] = documented.get("description") or DESCRIPTIONS[code]
            if not documented.get("content"):
                documented["content"] = {"application/json": {"schema": self._error_ref(code)}}
            for name, header in self._headers(code).items():
                documented.setdefault("headers", {}).setdefault(name, header)
        for code, documented in responses.items():  # e.g. a 409 a view describes in words
            if code.startswith("4") and code not in codes and "$ref" not in documented \
                    and not documented.get("content"):
                documented["content"] = {"application/json": {"schema": self._error_ref(code)}}
        return dict(sorted(responses.items()))

    def _map_basic_serializer(self, serializer, direction):
        """A serializer's `schema_limits` ({field: {keyword: value}}) state limits that its
        validate methods enforce (a number's bounds, a list's length) in the field's schema."""
        schema = super()._map_basic_serializer(serializer, direction)
        if direction != "request":  # what was stored before a limit came in is still shown
            return schema
        for name, limits in getattr(serializer, "schema_limits", {}).items():
            if name in schema.get("properties", {}):
                _merge_limits(schema["properties"][name], limits)
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        """Limits the serializers enforce that drf-spectacular leaves out of the schema."""
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if not isinstance(schema, dict):
            return schema
        if isinstance(field, serializers.ListSerializer):  # `many=True` of a nested serializer
            # (DRF keeps min_length/max_length on it; its stubs do not know them.)
            min_length = getattr(field, "min_length", None)
            max_length = getattr(field, "max_length", None)
            if not field.allow_empty:
                schema.setdefault("minItems", max(1, min_length or 0))
            elif min_length is not None:
                schema.setdefault("minItems", min_length)
            if max_length is not None:
                schema.setdefault("maxItems", max_length)
        if (isinstance(field, serializers.DecimalField) and direction == "request"
                and not field.coerce_to_string and field.decimal_places is not None):
            # More decimal places than the column keeps are refused, not rounded.
            schema.setdefault("multipleOf", float(f"1e-{field.decimal_places}"))
        if validate_one_line in getattr(field, "validators", []) and schema.get("type") == "string":
            schema.setdefault("pattern", ONE_LINE)
        return schema

    def _error_codes(self) -> list[str]:
        codes = []
        has_query = any(p.get("in") == "query" for p in self._get_parameters())
        if self.method in BODY_METHODS or has_query:
            codes.append("400")
        if self._needs_credentials():
            codes.append("401")
            # A read is refused only where a view says some roles may not read it.
            if self.method in UNSAFE or getattr(self.view, "roles_may_not_read", False):
                codes.append("403")
        if "{" in self.path or self._body_names_a_team():
            codes.append("404")
        # POSTs carry the rate limits and budgets; any call with a token can be refused while
        # its address is over the failed-authentication limit (common/auth_failures.py).
        if self.method == "POST" or self._needs_credentials():
            codes.append("429")
        if self.path.startswith(API_PREFIXES):
            codes.append("503")
        return codes

    def _needs_credentials(self) -> bool:
        perms = [p.__class__ for p in self.view.get_permissions()]
        if not perms or permissions.AllowAny in perms:
            return False
        return not (permissions.IsAuthenticatedOrReadOnly in perms
                    and self.method in permissions.SAFE_METHODS)

    def _body_names_a_team(self) -> bool:
        """A body's `team` slug is resolved through the scoping layer: an unknown or foreign
        team is a 404, as a foreign object in the path is."""
        if self.method not in BODY_METHODS:
            return False
        serializer = force_instance(self.get_request_serializer())
        return isinstance(serializer, serializers.Serializer) and "team" in serializer.fields

    @staticmethod
    def _headers(code: str) -> dict:
        if code in {"429", "503"}:
            return {"Retry-After": RETRY_AFTER}
        if code == "401":
            return {"WWW-Authenticate": WWW_AUTHENTICATE}
        return {}

    def _shared_response(self, code: str) -> dict:
        name = RESPONSE_NAMES[code]
        answer = {"description": DESCRIPTIONS[code],
                  "content": {"application/json": {"schema": self._error_ref(code)}}}
        if headers := self._headers(code):
            answer["headers"] = headers
        component = ResolvedComponent(name=name, type=ResolvedComponent.RESPONSE,
                                      object=f"tokvera_site.api_schema.{name}", schema=answer)
        self.registry.register_on_missing(component)
        return component.ref

    def _error_ref(self, code: str) -> dict:
        name, schema = (("ValidationError", VALIDATION_ERROR) if code in {"400", "422"}
                        else ("Error", ERROR))
        component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA,
                                      object=f"tokvera_site.api_schema.{name}", schema=schema)
        self.registry.register_on_missing(component)
        return component.ref


def _merge_limits(schema: dict, limits: dict) -> None:
    for given, replaced in (("exclusiveMinimum", "minimum"), ("minimum", "exclusiveMinimum"),
                            ("exclusiveMaximum", "maximum"), ("maximum", "exclusiveMaximum")):
        if given in limits:
            schema.pop(replaced, None)
    for keyword, value in limits.items():
        if isinstance(value, dict) and isinstance(schema.get(keyword), dict):
            _merge_limits(schema[keyword], value)
        else:
            schema[keyword] = value


# --- plain Django views that are part of the API ----------------------------------------------


def add_plain_views(endpoints):
    """Preprocessing hook: (path, regex, method, callback) for every plain Django view with an
    `openapi_view` (a DRF view's callback that documents it), next to DRF's own views."""
    from django.urls import URLPattern, URLResolver, get_resolver

    enumerator = EndpointEnumerator()
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            regex = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, regex)
            elif isinstance(pattern, URLPattern):
                described_by = getattr(pattern.callback, "openapi_view", None)
                if described_by is None:
                    continue
                path = enumerator.get_path_from_regex(regex)
                for method in enumerator.get_allowed_methods(described_by):
                    found.append((path, regex, method, described_by))

    walk(get_resolver().url_patterns, "")
    return [*endpoints, *found]


# --- what the JSON parser refuses in every body ---------------------------------------------


def refuse_nul_in_requests(result, generator, request, public):
    """Postprocessing hook: every string a request body or query parameter may carry, and
    every key of a free-form object in a body, refuses U+0000 (common/parsers.py)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    rule = _NoNul(schemas)
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for media in operation.get("requestBody", {}).get("content", {}).values():
                rule.visit(media.get("schema"))
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query":
                    rule.visit(parameter.get("schema"))
    if rule.used_json_value:
        schemas["JsonValue"] = JSON_VALUE
        result["components"]["schemas"] = dict(sorted(schemas.items()))
    return result


class _NoNul:
    PLAIN_FORMATS = {"uuid", "date-time", "date", "uri", "email"}
    ANNOTATIONS = {"description", "default", "readOnly", "writeOnly", "title"}

    def __init__(self, schemas: dict):
        self.schemas = schemas
        self.seen: set[str] = set()
        self.used_json_value = False

    def visit(self, node: Any) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[1]
            if ref.startswith("#/components/schemas/") and name not in self.seen \
                    and name in self.schemas:
                self.seen.add(name)
                self.visit(self.schemas[name])
            return
        self.constrain(node)
        children = [*(node.get("properties") or {}).values(),
                    *(node.get(k) for k in ("items", "additionalProperties", "not")),
                    *(c for k in ("oneOf", "anyOf", "allOf") for c in node.get(k) or [])]
        for child in children:
            self.visit(child)

    def constrain(self, node: dict) -> None:
        if node.get("oneOf") and {} in node["oneOf"]:  # "anything or null" is just anything
            del node["oneOf"]
        raw = node.get("type")
        types = set(raw) if isinstance(raw, list) else {raw}
        if "string" in types and not {"pattern", "enum"} & set(node) \
                and node.get("format") not in self.PLAIN_FORMATS:
            node["pattern"] = NO_NUL
        if "properties" in node:
            # A body sends its fields and nothing else (a serializer ignores other members,
            # but they are no part of the request).
            node.setdefault("additionalProperties", False)
        elif "object" in types and node.get("additionalProperties") in (None, True, {}):
            # A free-form object's members: any JSON without NUL.
            node["additionalProperties"] = {"$ref": JSON_VALUE_REF}
            node.setdefault("propertyNames", {"pattern": NO_NUL})
            self.used_json_value = True
        elif "object" in types and node.get("additionalProperties") is not False:
            node.setdefault("propertyNames", {"pattern": NO_NUL})
        elif types == {None} and not node.keys() - self.ANNOTATIONS:  # any JSON value
            node["allOf"] = [{"$ref": JSON_VALUE_REF}]
            self.used_json_value = True
