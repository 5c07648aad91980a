from django.urls import path

from audit import views

urlpatterns = [
    path("teams/<slug:slug>/audit/", views.team_audit, name="team-audit"),
]
