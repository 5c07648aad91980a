"""The public status page (/status/<slug>/, no login), its Atom feed and its email subscription
(subscribe, confirm, unsubscribe: scans/status_pages/subscriptions.py), and its team settings
page (/teams/<slug>/status-page/: every member reads it, writers change it, outsiders get 404)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_safe

from accounts.identity import SignedInRequest
from accounts.middleware import same_for_everyone
from accounts.models import Team
from accounts.tenancy import Access, get_visible_or_404, require_write
from accounts.validators import validate_one_line
from common import client_address
from scans.models import Endpoint, StatusPage, StatusPageEndpoint
from scans.status_pages import subscriptions
from scans.status_pages.feed import cached_feed
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
        return _unavailable()
    if html is None:
        raise Http404("No such status page.")
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={CACHE_S}"
    response["X-Content-Type-Options"] = "nosniff"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _unavailable() -> HttpResponse:
    response = HttpResponse(
        "This status page is unavailable right now; try again shortly.",
        status=503,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


@same_for_everyone
@require_safe
def public_status_feed(request: HttpRequest, slug: str) -> HttpResponse:
    """The page's Atom feed: cached and public like the page."""
    try:
        xml = cached_feed(slug)
    except StatusPageUnavailable:
        return _unavailable()
    if xml is None:
        raise Http404("No such status page.")
    response = HttpResponse(xml, content_type="application/atom+xml; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={CACHE_S}"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _enabled_page(slug: str) -> StatusPage:
    page = StatusPage.dangerously_unscoped.filter(  # public: the slug is the whole credential
        slug=slug, enabled=True).first()
    if page is None:
        raise Http404("No such status page.")
    return page


def _answer(request: HttpRequest, page: StatusPage, heading: str, text: str, *, status: int = 200,
            subscribe_form: bool = False, unsubscribe_form: bool = False) -> HttpResponse:
    response = render(request, "scans/status_page_subscription.html",
                      {"title": page.title, "slug": page.slug, "heading": heading, "text": text,
                       "subscribe_form": subscribe_form, "unsubscribe_form": unsubscribe_form,
                       "honeypot_field": subscriptions.HONEYPOT_FIELD}, status=status)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the links carry their token
    return response


# Public and sessionless, so the form carries no CSRF token; a forged request only starts a
# double opt-in (nothing is sent to the unconfirmed), within the limits.
@csrf_exempt
@same_for_everyone
@require_http_methods(["GET", "HEAD", "POST"])
def public_subscribe(request: HttpRequest, slug: str) -> HttpResponse:
    page = _enabled_page(slug)
    if request.method != "POST":
        return _answer(request, page, f"Get {page.title} by email",
                       "A mail with a confirmation link comes first; nothing else is sent until "
                       "it is followed. Every mail has a link to unsubscribe.", subscribe_form=True)
    error = subscriptions.subscribe(
        page, request.POST.get("email", ""), client_address.of_request(request),
        honeypot=request.POST.get(subscriptions.HONEYPOT_FIELD, ""))
    if error:
        return _answer(request, page, "Not subscribed", error, status=400)
    # The one answer, whatever was done: nobody learns whether an address is subscribed.
    return _answer(request, page, "Check your inbox",
                   "If this address can be subscribed, a mail with a confirmation link is on its "
                   "way. Nothing else is sent until the link is followed.")


@same_for_everyone
@require_safe
def public_confirm(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    page = _enabled_page(slug)
    if subscriptions.confirm(page, token):
        return _answer(request, page, "Subscribed",
                       "You will get a mail when an incident starts, is updated or ends, and when "
                       "maintenance is announced. Every mail has a link to unsubscribe.")
    return _answer(request, page, "Link not valid",
                   "This confirmation link has expired, was already used or is not complete. "
                   "Subscribe again on the status page.", status=404)


# The token in the link is the credential, not a session: mail clients post here with no
# cookie (RFC 8058 one-click). A plain visit asks before it unsubscribes, so a link scanner
# opening the mail does not unsubscribe anyone.
@csrf_exempt
@same_for_everyone
@require_http_methods(["GET", "HEAD", "POST"])
def public_unsubscribe(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    page = _enabled_page(slug)
    if request.method == "POST":
        subscriptions.unsubscribe(page, token)
        return _answer(request, page, "Unsubscribed", "This address gets no more mail from this page.")
    return _answer(request, page, "Unsubscribe",
                   "Stop the mails of this status page to this address?", unsubscribe_form=True)


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
        # Only how many: the addresses are never shown, not even to the team.
        "subscriber_count": subscriptions.count_confirmed(page),
    }
    return render(request, "scans/status_page_settings.html", context, status=400 if errors else 200)
