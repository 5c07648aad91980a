from allauth.account.decorators import secure_admin_login
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from common import errors
from common.metrics import site_metrics
from tokvera_site.api_docs import OfflineRedocView, SwaggerView
from tokvera_site.health import healthz

handler404 = errors.not_found
handler400 = errors.bad_request
handler500 = errors.server_error

# The admin signs in through the site's login (allauth: throttling, two-factor), never with its
# own password-only form, whose session would be a full site session.
admin.site.login = secure_admin_login(admin.site.login)  # type: ignore[method-assign]

urlpatterns = [
    # The network's calls first: hosts call them many times a second, and Django tries the
    # patterns in order (allauth's alone are dozens). No other pattern matches their paths.
    path("", include("benchmarks.urls")),
    path("admin/", admin.site.urls),
    # Sign-up, login, logout, email verification, password reset and change, two-factor (/2fa/):
    # django-allauth, at the site's root so /login/ and /logout/ stay where they were.
    path("", include("allauth.urls")),
    path("healthz", healthz, name="healthz"),
    path("metrics", site_metrics, name="site-metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Redoc from the sidecar, loading nothing from elsewhere: it works offline.
    path("api/redoc/", OfflineRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("api/v1/", include("tokvera_site.api_urls")),
    path("", include("accounts.urls")),
    path("", include("audit.urls")),
    path("", include("scans.urls")),
]
