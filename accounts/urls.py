"""The team pages: home, profile, team create/rename/delete, invitations, members, tokens and
settings (views in accounts/views.py). Sign-in pages are allauth's (tokvera_site/urls.py)."""

from django.urls import path

from accounts import views

urlpatterns = [
    path("", views.home, name="home"),
    path("invites/<str:secret>/", views.invite_accept, name="invite-accept"),
    path("profile/", views.profile, name="profile"),
    path("teams/new", views.team_create, name="team-create"),
    path("teams/<slug:slug>/rename", views.team_rename, name="team-rename"),
    path("teams/<slug:slug>/delete", views.team_delete, name="team-delete"),
    path("teams/<slug:slug>/invitations/<uuid:public_id>/revoke", views.invitation_revoke,
         name="invitation-revoke"),
    path("teams/<slug:slug>/invitations/<uuid:public_id>/resend", views.invitation_resend,
         name="invitation-resend"),
    path("teams/<slug:slug>/switch", views.team_switch, name="team-switch"),
    path("teams/<slug:slug>/members/", views.team_members, name="team-members"),
    path("teams/<slug:slug>/members/invite", views.member_invite, name="member-invite"),
    path("teams/<slug:slug>/members/<uuid:public_id>/role", views.member_role, name="member-role"),
    path("teams/<slug:slug>/members/<uuid:public_id>/remove", views.member_remove,
         name="member-remove"),
    path("teams/<slug:slug>/tokens/", views.team_tokens, name="team-tokens"),
    path("teams/<slug:slug>/settings/", views.team_settings, name="team-settings"),
    path("teams/<slug:slug>/tokens/new", views.token_create, name="token-create"),
    path("teams/<slug:slug>/tokens/<uuid:public_id>/revoke", views.token_revoke,
         name="token-revoke"),
]
