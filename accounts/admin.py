from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import ApiToken, Invitation, Membership, Team
from common.admin_display import time_column


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", time_column("created_at", "created")]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", time_column("created_at", "created")]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email", "team__slug"]
    raw_id_fields = ["user", "team"]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["email", "team", "role", time_column("created_at", "created"),
                    time_column("expires_at", "expires"), time_column("accepted_at", "accepted")]
    exclude = ["secret_hash"]
    readonly_fields = ["accepted_at", "accepted_by"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created by the team page or `createtoken`; here they can only be revoked."""

    list_display = ["prefix", "team", "name", "scope", time_column("created_at", "created"),
                    time_column("last_used_at", "last used"), time_column("revoked_at", "revoked")]
    list_filter = ["scope"]
    exclude = ["secret_hmac"]
    readonly_fields = ["prefix", "team", "scope", "created_by", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"{count} token(s) revoked.")
