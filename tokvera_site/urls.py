from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.urls import include, path
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import page_not_found
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from tokvera_site.api_docs import OfflineRedocView
from tokvera_site.health import healthz
from tokvera_site.metrics import site_metrics

API_PREFIXES = ("/api/", "/v1/")


def not_found(request, exception=None):
    """JSON for API callers (e.g. a malformed id that no route matches), HTML for people."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)


def bad_request(request, exception=None):
    """JSON for API callers: Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (16 MB)
    or a malformed request before any view runs."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse({"detail": "Bad request: malformed, or a body over 16 MB."},
                            status=400)
    return django_bad_request(request, exception)


handler404 = not_found
handler400 = bad_request

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("metrics", site_metrics, name="site-metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Redoc from the sidecar, loading nothing from elsewhere: it works offline.
    path("api/redoc/", OfflineRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("api/v1/", include("tokvera_site.api_urls")),
    path("", include("benchmarks.urls")),
    path("", include("accounts.urls")),
    path("", include("scans.urls")),
]
