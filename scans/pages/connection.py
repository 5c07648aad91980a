"""The endpoint form's "Test connection": the preflight for what is typed, before saving.

One small POST view for a new endpoint (its team in the URL) and for an existing one (which
may test with its stored API key while the URL stays on the stored origin; a key typed in the
form always wins). Outsiders get 404, read-only roles 403, like the form itself.

Three answers from the same view:
- ``Accept: application/json``: the report as JSON;
- ``X-Tokvera-Fragment: 1`` (static/endpoint-form.js): the result block as an HTML fragment;
- otherwise (no JavaScript; the button is a submit button of the form): the whole form again,
  with what was typed, the result beside the button and the model list to pick from.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from accounts import encryption
from accounts.identity import SignedInRequest
from accounts.models import Team
from accounts.tenancy import require_write
from accounts.views import team_to_create_in
from scans.endpoints import connection_check
from scans.endpoints import service as endpoints
from scans.models import Endpoint
from scans.origins import origin_of
from scans.pages.common import endpoint_or_404
from scans.pages.forms import EndpointForm

FRAGMENT_HEADER = "X-Tokvera-Fragment"


@login_required
@require_POST
@sensitive_post_parameters("api_key")
def test_connection_new(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_to_create_in(request, slug)
    return _answer(request, team, None)


@login_required
@require_POST
@sensitive_post_parameters("api_key")
def test_connection(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    endpoint = endpoint_or_404(request, public_id)
    require_write(request, endpoint)
    return _answer(request, endpoint.team, endpoint)


def _answer(request: HttpRequest, team: Team, endpoint: Endpoint | None) -> HttpResponse:
    data = request.POST.copy()
    picked = data.get("pick_model", "").strip()  # a model id chosen from the last result
    if picked:
        data["model"] = picked
    report, error, status, retry_after = None, None, 200, None
    try:
        report = connection_check.check_connection(
            team.pk,
            data.get("base_url", ""),
            data.get("model", ""),
            _api_key(data, endpoint),
            timeout_s=_number(data.get("timeout_s")),
        )
    except endpoints.InvalidURL as exc:
        error, status = f"{str(exc)[0].upper()}{str(exc)[1:]}", 400
    except connection_check.TooManyTests as exc:
        error, status, retry_after = f"{str(exc)[0].upper()}{str(exc)[1:]}.", 429, exc.retry_after_s
    if report is not None and report.model_chosen:
        data["model"] = report.model  # no model was typed: the server's first one is proposed
    if "application/json" in request.headers.get("Accept", ""):
        response: HttpResponse = JsonResponse(report.as_dict() if report else {"error": error}, status=status)
    elif request.headers.get(FRAGMENT_HEADER):
        response = render(
            request,
            "scans/_connection_result.html",
            {"connection": report, "connection_error": error, "test_url": _test_url(team, endpoint)},
            status=status,
        )
    else:
        form = EndpointForm(
            initial=_initial(data),
            instance=endpoint,
            team=team,
        )
        response = render(
            request,
            "scans/endpoint_form.html",
            {
                "team": team,
                "form": form,
                "endpoint": endpoint,
                "connection": report,
                "connection_error": error,
                "key_dropped": bool(data.get("api_key", "").strip()),
                "files_dropped": bool(request.FILES),
            },
            status=status,
        )
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _test_url(team: Team, endpoint: Endpoint | None) -> str:
    if endpoint is not None:
        return reverse("endpoint-test-connection", args=[endpoint.public_id])
    return reverse("endpoint-test-connection-new", args=[team.slug])


def _api_key(data: QueryDict, endpoint: Endpoint | None) -> str | None:
    """The key typed in the form; else, for an endpoint whose URL stays on its stored origin,
    the stored key (it is sent there by every scan anyway); never the stored key to another
    origin (scans/endpoints/url_rules.py)."""
    typed = data.get("api_key", "").strip()
    if typed:
        return typed
    if endpoint is None or not endpoint.has_api_key or data.get("clear_api_key"):
        return None
    try:
        same_origin = origin_of(endpoints.clean_base_url(data.get("base_url", ""))) == origin_of(
            endpoint.base_url
        )
    except endpoints.InvalidURL:
        return None
    return encryption.decrypt(endpoint.api_key_encrypted) or None if same_origin else None


def _number(value: Any) -> float:  # whatever was posted; anything but a number is the maximum
    try:
        number = float(value)
    except (TypeError, ValueError):
        return connection_check.MAX_TIMEOUT_S
    return number if number == number else connection_check.MAX_TIMEOUT_S  # NaN


# What the re-rendered form must not show again (write-only fields) or cannot (files).
_NOT_RENDERED_BACK = {
    "api_key",
    "csrfmiddlewaretoken",
    "pick_model",
    "test_connection",
    "prompt_sample",
    "load_dataset",
}


def _initial(data: QueryDict) -> dict:
    """What was typed, as the unbound form's initial values (no error is shown for a form
    nobody tried to save). Unticked boxes are absent from a POST: they are off."""
    initial: dict = {key: data.get(key) for key in data if key not in _NOT_RENDERED_BACK}
    for name, field in EndpointForm.base_fields.items():
        if isinstance(field, forms.BooleanField):
            initial[name] = name in data
        elif isinstance(field, forms.MultipleChoiceField | forms.ModelMultipleChoiceField):
            initial[name] = data.getlist(name)  # every value picked, not only the last
    return initial
