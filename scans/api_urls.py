from django.urls import path
from rest_framework.routers import SimpleRouter

from scans import api

router = SimpleRouter(trailing_slash=True)
router.register("teams", api.TeamViewSet, basename="api-team")

urlpatterns = [path("me/", api.whoami, name="api-whoami"), *router.urls]
