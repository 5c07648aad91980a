"""Redoc served offline: the sidecar's pinned bundle, a template without web fonts, and a
Content-Security-Policy that lets the page load nothing from elsewhere (Redoc's bundle would
otherwise fetch its "by Redocly" logo from cdn.redoc.ly)."""

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

REDOC_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
             "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
             "worker-src 'self' blob:; connect-src 'self'")


class OfflineRedocView(SpectacularRedocView):
    template_name = "api/redoc.html"

    @extend_schema(exclude=True)  # a page about the API, not part of it
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = REDOC_CSP
        return response


class SwaggerView(SpectacularSwaggerView):
    """Swagger UI from the sidecar, with the schema preloaded and resolved once
    (templates/api/swagger_ui.html, static/swagger-resolve-once.js)."""

    template_name = "api/swagger_ui.html"

    @extend_schema(exclude=True)  # a page about the API, not part of it
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
