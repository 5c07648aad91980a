"""Public badges: an endpoint's grade as SVG or JSON, found by its badge key alone."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from accounts.middleware import same_for_everyone
from accounts.tenancy import scoped_to_teams
from scans.models import Endpoint, Scan, ScanStatus
from scans.pages import charts

BADGE_LABEL = "tokvera"


BADGE_CACHE = "public, max-age=300"


def _badge_endpoint(key: str) -> Endpoint:
    # Public and unauthenticated: no request has a team here. The unguessable key is the whole
    # credential, and the badge shows nothing but a grade.
    endpoint = (Endpoint.dangerously_unscoped.filter(badge_key=key).select_related("team")
                .only("pk", "team_id", "team__badge_site_measured_only").first())
    if endpoint is None:
        raise Http404("No such badge.")
    return endpoint


def _badge_state(key: str) -> dict:
    """The latest grade and where it came from: measured by the site, or pushed (a report
    whose checks the site recomputed from its samples). A team can keep pushed grades off."""
    endpoint = _badge_endpoint(key)
    scans = (scoped_to_teams(Scan, [endpoint.team_id])
             .filter(endpoint_id=endpoint.pk, status=ScanStatus.SUCCEEDED))
    site_only = endpoint.team.badge_site_measured_only
    if site_only:
        scans = scans.filter(pushed=False)
    latest = scans.order_by("-queued_at").values("grade", "provisional", "pushed", "down").first()
    if latest is None:
        return {"message": "no grade", "grade": None, "provisional": False, "source": None,
                "colour": charts.NO_GRADE_COLOUR,
                "title": "no scan by the site yet" if site_only else "no scan yet"}
    source = "pushed" if latest["pushed"] else "site"
    source_text = ("pushed from inside its network" if latest["pushed"]
                   else "measured by the site")
    grade = latest["grade"] if latest["grade"] in charts.BAND_COLOURS else None
    provisional = bool(latest["provisional"])
    if latest["down"]:  # down is a state, not a grade (no "F (provisional)")
        return {"message": "down", "grade": None, "provisional": False, "source": source,
                "colour": charts.BAND_COLOURS["F"],
                "title": f"down: the endpoint did not answer, no grade ({source_text})"}
    if grade is None:
        return {"message": "no grade", "grade": None, "provisional": provisional,
                "source": source, "colour": charts.NO_GRADE_COLOUR,
                "title": f"no grade: insufficient evidence ({source_text})"}
    notes = [word for word, on in (("provisional", provisional), ("pushed", latest["pushed"]))
             if on]
    message = f"{grade} ({', '.join(notes)})" if notes else grade
    return {"message": message, "grade": grade, "provisional": provisional, "source": source,
            "colour": charts.BAND_COLOURS[grade], "title": f"grade {message}, {source_text}"}


def _public(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = BADGE_CACHE
    response["X-Content-Type-Options"] = "nosniff"
    response["Access-Control-Allow-Origin"] = "*"
    return response


@same_for_everyone
@require_GET
def badge_svg(request: HttpRequest, key: str) -> HttpResponse:
    state = _badge_state(key)
    svg = charts.badge(BADGE_LABEL, state["message"], state["colour"],
                       grade=state["grade"], provisional=state["provisional"],
                       source=state["source"],
                       title=f"{BADGE_LABEL}: {state['title']}")
    response = HttpResponse(svg, content_type="image/svg+xml; charset=utf-8")
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return _public(response)


@same_for_everyone
@require_GET
def badge_json(request: HttpRequest, key: str) -> HttpResponse:
    """The shields.io endpoint format: schemaVersion, label, message, color."""
    state = _badge_state(key)
    return _public(JsonResponse({
        "schemaVersion": 1, "label": BADGE_LABEL, "message": state["message"],
        "color": state["colour"].lstrip("#"), "cacheSeconds": 300,
    }))
