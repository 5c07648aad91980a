"""Admin for the network: hosts (online state, trust, EWMAs, reputation, recent jobs, failure
share), the catalog, jobs (read-only, without their private bodies) and the audit log.

Every change goes through benchmarks.network.hosts, which records it in the audit log; the change
form and every action do. Hardware trust is offered nowhere and refused by the model.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from accounts.validators import validate_one_line
from benchmarks.models import GRANTABLE_TRUST, AuditEntry, CatalogModel, Host, Job, JobStatus
from benchmarks.network import audit, ewma, hosts
from benchmarks.network.system_wide import ALL_HOSTS, ALL_JOBS
from common.admin_display import figure, time_column, when

RECENT_DAYS = 7
RECENT_JOBS_SHOWN = 20


def _show_tokens(request, modeladmin, issued: list[tuple[Host, str]]) -> TemplateResponse:
    """Tokens are shown once, in this response only (never in a message or a cookie)."""
    response = TemplateResponse(request, "admin/benchmarks/host/tokens.html", {
        **modeladmin.admin_site.each_context(request),
        "title": "New host tokens",
        "issued": issued,
        "opts": modeladmin.model._meta,
    })
    response["Cache-Control"] = "no-store"
    return response


class HostForm(forms.ModelForm):
    trust_level = forms.ChoiceField(
        choices=[(t.value, t.label) for t in GRANTABLE_TRUST],
        help_text="Hardware trust is reserved and cannot be granted.",
    )

    class Meta:
        model = Host
        fields = ["name", "team", "trust_level", "suspended", "connect_ready"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["name"].validators.append(validate_one_line)


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    form = HostForm
    list_display = [
        "name", "team", "online", "trust_level", "reputation_shown", "ttft_shown", "tps_shown",
        "jobs_recent", "failure_share", "connect_ready", "suspended",
        time_column("last_heartbeat_at", "last heartbeat"),
    ]
    list_filter = ["trust_level", "suspended", "connect_ready"]
    search_fields = ["name", "team__slug", "token_prefix"]
    raw_id_fields = ["team"]
    readonly_fields = [
        "public_id", "token_prefix", "token_issued", "revoked", "last_heartbeat", "slots",
        "advertised", "gpu_model", "vram_shown", "cpu_model", "ram_shown", "reputation_shown",
        "ttft_shown", "tps_shown", "last_assigned", "created", "recent_jobs",
    ]
    actions = [
        "set_trust_none", "set_trust_software", "set_trust_edr", "suspend", "unsuspend",
        "revoke_token", "rotate_token", "mark_connect_ready", "mark_connect_not_ready",
    ]

    def has_delete_permission(self, request, obj=None):
        return False  # a host's job history stays; revoke its token instead

    def get_queryset(self, request):
        since = timezone.now() - timedelta(days=RECENT_DAYS)
        return super().get_queryset(request).select_related("team").annotate(
            settled_recent=Count("jobs", filter=Q(jobs__settled_at__gte=since)),
            failed_recent=Count("jobs", filter=Q(jobs__settled_at__gte=since,
                                                 jobs__status=JobStatus.FAILED)),
        )

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["name", "team", "trust_level"]})]
        return [
            (None, {"fields": ["name", "team", "public_id", "trust_level", "suspended", "connect_ready"]}),
            ("Token", {"fields": ["token_prefix", "token_issued", "revoked"]}),
            ("Last heartbeat", {"fields": ["last_heartbeat", "slots", "advertised", "gpu_model",
                                           "vram_shown", "cpu_model", "ram_shown"]}),
            ("Performance", {"fields": ["reputation_shown", "ttft_shown", "tps_shown",
                                        "last_assigned", "created"]}),
            ("Recent jobs", {"fields": ["recent_jobs"]}),
        ]

    # --- columns ---

    @admin.display(boolean=True, description="online")
    def online(self, host):
        return host.is_online()

    @admin.display(description="reputation", ordering="reputation")
    def reputation_shown(self, host):
        return f"{host.reputation:.3f}"

    @admin.display(description="TTFT EWMA", ordering="ttft_ewma_ms")
    def ttft_shown(self, host):
        return figure(host.ttft_ewma_ms, "ms")

    @admin.display(description="TPS EWMA", ordering="tps_ewma")
    def tps_shown(self, host):
        return figure(host.tps_ewma, "tokens/s", 1)

    # The change page's times, in the list's format (one format across the admin).
    token_issued = time_column("token_issued_at", "token issued")
    revoked = time_column("revoked_at", "revoked")
    last_heartbeat = time_column("last_heartbeat_at", "last heartbeat")
    last_assigned = time_column("last_assigned_at", "last assigned")
    created = time_column("created_at", "created")

    @admin.display(description="GPU memory")
    def vram_shown(self, host):
        return figure(host.vram_mb, "MB")

    @admin.display(description="memory")
    def ram_shown(self, host):
        return figure(host.ram_mb, "MB")

    @admin.display(description=f"settled jobs ({RECENT_DAYS} d)", ordering="settled_recent")
    def jobs_recent(self, host):
        return host.settled_recent

    @admin.display(description=f"failure share ({RECENT_DAYS} d)")
    def failure_share(self, host):
        if not host.settled_recent:
            return "—"
        return f"{100 * host.failed_recent / host.settled_recent:.0f} %"

    @admin.display(description="recent jobs")
    def recent_jobs(self, host):
        rows = (
            ALL_JOBS.filter(host=host)  # admin: the host's jobs, whichever team submitted them
            .order_by("-created_at")
            .only("id", "model_id", "status", "created_at", "settled_at", "ttft_ms",
                  "completion_tokens", "elapsed_ms", "failure_reason")[:RECENT_JOBS_SHOWN]
        )
        if not rows:
            return "—"
        body = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (str(j.id)[:8], j.model_id, j.status, when(j.created_at), figure(j.ttft_ms, "ms"),
                 figure(ewma.tps_sample(j), "tokens/s", 1), j.failure_reason or "")
                for j in rows
            ),
        )
        return format_html(
            "<table><tr><th>job</th><th>model</th><th>status</th><th>created</th>"
            "<th>TTFT</th><th>TPS</th><th>failure</th></tr>{}</table>", body
        )

    # --- saving: through the services, so every change is audited ---

    def save_model(self, request, obj, form, change):
        if not change:
            host, token = hosts.create_host(obj.team, obj.name, form.cleaned_data["trust_level"],
                                            actor=request.user)
            obj.pk = host.pk
            obj._new_token = token
            return
        current = ALL_HOSTS.get(pk=obj.pk)  # admin: any operator's host, as stored before this edit
        edits = {}
        for field in ("name", "team"):
            if field in form.changed_data:
                old, new = getattr(current, field), getattr(obj, field)
                edits[field] = [getattr(old, "slug", old), getattr(new, "slug", new)]
        if edits:
            Host.objects.for_team(current.team_id).filter(pk=obj.pk).update(name=obj.name, team=obj.team)
            audit.record(request.user, obj, "edit", edits)
        if "trust_level" in form.changed_data:
            hosts.set_trust(current, form.cleaned_data["trust_level"], actor=request.user)
        if "suspended" in form.changed_data:
            hosts.set_suspended(current, obj.suspended, actor=request.user)
        if "connect_ready" in form.changed_data:
            hosts.set_connect_ready(current, obj.connect_ready, actor=request.user)

    def save_related(self, request, form, formsets, change):
        pass  # the only relation (catalog models) is the host's own, from heartbeats

    def response_add(self, request, obj, post_url_continue=None):
        host = Host.objects.for_team(obj.team_id).get(pk=obj.pk)
        return _show_tokens(request, self, [(host, obj._new_token)])

    # --- actions ---

    def _each(self, request, queryset, fn, done: str):
        for host in queryset:
            fn(host, actor=request.user)
        self.message_user(request, f"{queryset.count()} host(s): {done}.", messages.SUCCESS)

    @admin.action(description="Set trust: none")
    def set_trust_none(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_trust(h, "none", actor), "trust none")

    @admin.action(description="Set trust: software")
    def set_trust_software(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_trust(h, "software", actor),
                   "trust software")

    @admin.action(description="Set trust: EDR")
    def set_trust_edr(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_trust(h, "edr", actor), "trust EDR")

    @admin.action(description="Suspend")
    def suspend(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_suspended(h, True, actor), "suspended")

    @admin.action(description="Unsuspend")
    def unsuspend(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_suspended(h, False, actor),
                   "unsuspended")

    @admin.action(description="Revoke token")
    def revoke_token(self, request, queryset):
        self._each(request, queryset, hosts.revoke_token, "token revoked")

    @admin.action(description="Rotate token (shows the new tokens once)")
    def rotate_token(self, request, queryset):
        issued = [(host, hosts.rotate_token(host, actor=request.user)) for host in queryset]
        return _show_tokens(request, self, issued)

    @admin.action(description="Payout account ready (Connect)")
    def mark_connect_ready(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_connect_ready(h, True, actor),
                   "payout account ready")

    @admin.action(description="Payout account not ready")
    def mark_connect_not_ready(self, request, queryset):
        self._each(request, queryset, lambda h, actor: hosts.set_connect_ready(h, False, actor),
                   "payout account not ready")


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ["id", "display_name", "quant", "context_shown", "active", "online_hosts"]
    list_filter = ["active"]
    search_fields = ["id", "display_name"]

    def get_readonly_fields(self, request, obj=None):
        return ["id"] if obj is not None else []

    @admin.display(description="context", ordering="context_len")
    def context_shown(self, model):
        return figure(model.context_len, "tokens")

    @admin.display(description="online hosts")
    def online_hosts(self, model):
        return ALL_HOSTS.online_for(model.pk).count()  # admin: every operator's hosts

    def save_model(self, request, obj, form, change):
        changes = {
            field: [form.initial.get(field) if change else None, form.cleaned_data.get(field)]
            for field in form.changed_data
        }
        super().save_model(request, obj, form, change)
        if changes or not change:
            audit.record(request.user, obj, "edit" if change else "create", changes)

    def delete_model(self, request, obj):
        audit.record(request.user, obj, "delete")
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            audit.record(request.user, obj, "delete")
        super().delete_queryset(request, queryset)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records that are looked at, never edited here (jobs belong to teams, audit to history)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Read-only. Request and result bodies are private to the team and the host: not shown."""

    list_display = ["id", "team", "model", "status", "host", "attempts",
                    time_column("created_at", "created"), time_column("settled_at", "settled"),
                    "failure_reason"]
    list_filter = ["status", "model"]
    search_fields = ["id", "team__slug", "host__name"]
    exclude = ["request_json", "result_json"]
    list_select_related = ["team", "model", "host"]



@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = [time_column("at", "at"), "actor_label", "action", "target_type", "target_label",
                    "changes"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_label", "target_label", "target_id"]

