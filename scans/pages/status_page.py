"""The public status page (/status/<slug>/, no login) and its team settings page
(/teams/<slug>/status-page/: every member reads it, writers change it, outsiders get 404)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from accounts.identity import SignedInRequest
from accounts.middleware import same_for_everyone
from accounts.models import Team
from accounts.tenancy import Access, get_visible_or_404, require_write
from accounts.validators import validate_one_line
from scans.models import Endpoint, StatusPage, StatusPageEndpoint
from scans.status_pages.rendering import CACHE_S, StatusPageUnavailable, cached_page
from scans.status_pages.settings import page_of, save_settings, validate_slug

UNAVAILABLE_RETRY_AFTER_S = 30


@same_for_everyone
@require_safe
def public_status_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Anonymous and shared-cache friendly: no session, user or CSRF token is read, so Django
    adds no cookie and no Vary: Cookie."""
    try:
        html = cached_page(slug)
    except StatusPageUnavailable:
        response = HttpResponse(
            "This status page is unavailable right now; try again shortly.",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
        response["Cache-Control"] = "no-store"
        return response
    if html is None:
        raise Http404("No such status page.")
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={CACHE_S}"
    response["X-Content-Type-Options"] = "nosniff"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _form_rows(team: Team, page: StatusPage, posted: QueryDict | None = None) -> list[dict]:
    shown = {e.endpoint_id: e for e in StatusPageEndpoint.objects.for_team(team).filter(status_page=page)}
    rows = []
    for endpoint in Endpoint.objects.for_team(team).order_by("name"):
        entry = shown.get(endpoint.pk)
        key = str(endpoint.public_id)
        if posted is not None:
            checked = posted.get(f"show_{key}") == "on"
            name = posted.get(f"name_{key}", "")
        else:
            checked = entry is not None
            name = entry.display_name if entry and entry.display_name != endpoint.name else ""
        rows.append(
            {
                "endpoint": endpoint,
                "key": key,
                "checked": checked,
                "name": name,
                "position": entry.position if entry else 10_000,
            }
        )
    rows.sort(key=lambda r: (not r["checked"], r["position"], r["endpoint"].name))
    return rows


@login_required
def status_page_settings(request: SignedInRequest, slug: str) -> HttpResponse:
    team = get_visible_or_404(request, Team, slug=slug)
    page = page_of(team)
    can_write = Access.for_request(request).can_write(team.pk)
    errors: dict[str, str] = {}
    posted = None
    if request.method == "POST":
        require_write(request, page)
        posted = request.POST
        rows = _form_rows(team, page, posted)
        chosen = posted.get("slug", "").strip()
        new_slug = page.slug
        if posted.get("new_random_slug") == "on":
            from scans.models import new_status_page_slug

            new_slug = new_status_page_slug()
        elif chosen and chosen != page.slug:
            try:
                new_slug = validate_slug(chosen)
            except ValidationError as exc:
                errors["slug"] = exc.messages[0]
        title = posted.get("title", "").strip()
        names = {"title": title, **{f"name_{row['key']}": row["name"] for row in rows}}
        for field, text in names.items():
            # Shown to the public: the same rule as every other name (no control or bidi
            # character), so it reads as it was written.
            if len(text) > 100:
                errors[field] = "At most 100 characters."
                continue
            try:
                validate_one_line(text)
            except ValidationError as exc:
                errors[field] = exc.messages[0]
        if not errors:
            try:
                save_settings(
                    page,
                    enabled=posted.get("enabled") == "on",
                    slug=new_slug,
                    title=title,
                    shown=[(r["endpoint"], r["name"]) for r in rows if r["checked"]],
                )
            except ValidationError as exc:
                errors["slug"] = exc.messages[0]
            else:
                messages.success(request, "Status page saved.")
                return redirect("status-page-settings", slug=team.slug)
    else:
        rows = _form_rows(team, page)
    context = {
        "team": team,
        "page": page,
        "rows": rows,
        "can_write": can_write,
        "errors": errors,
        "public_url": request.build_absolute_uri(f"/status/{page.slug}/"),
        "slug_value": posted.get("slug", page.slug) if posted else page.slug,
        "title_value": posted.get("title", page.title) if posted else page.title,
    }
    return render(request, "scans/status_page_settings.html", context, status=400 if errors else 200)
