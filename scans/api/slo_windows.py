"""The SLO of one endpoint as JSON (`GET /api/v1/endpoints/{id}/slo`): each window's status
(breaching / at risk / meeting / no data), the good share of the covered time, how much of
the window no scan covers, the error budget in time, the burn rate over every span and the
burn-rate alert pairs, from the same read model as the endpoint page (scans/history/slo_windows.py)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from scans.history import slo_windows
from scans.history.slo_wording import WindowWords, target_label
from scans.models import Endpoint

ALERT_LEVELS = ["", "ticket", "page"]


class BurnRateSerializer(serializers.Serializer):
    span = serializers.CharField(help_text="the span as the page names it: '5 min', '24 h', '3 d'")
    span_s = serializers.IntegerField(help_text="the last this many seconds")
    rate = serializers.FloatField(
        allow_null=True,
        help_text="bad share of the covered time in the span ÷ (1 − objective); null when "
        "nothing in the span is covered or the objective is 100 %",
    )
    covered_s = serializers.FloatField(help_text="seconds of the span a scan covers")


class AlertWindowSerializer(serializers.Serializer):
    # A plain string: an enum here would give alert_level's choice set a second schema name.
    level = serializers.CharField(help_text="'page' (a fast pair) or 'ticket' (a slow pair)")
    windows = serializers.CharField(help_text="e.g. '6 h and 30 min'")
    long_s = serializers.IntegerField()
    short_s = serializers.IntegerField()
    threshold = serializers.FloatField(help_text="fires when both rates reach it")
    long_rate = serializers.FloatField(allow_null=True)
    short_rate = serializers.FloatField(allow_null=True)
    firing = serializers.BooleanField(
        help_text="both rates reach the threshold and at least half of the long span is covered"
    )
    meaning = serializers.CharField(help_text="the pair in plain words")


class SloTargetSerializer(serializers.Serializer):
    key = serializers.ChoiceField(choices=list(slo_windows.TARGET_KEYS))
    text = serializers.CharField(help_text="e.g. 'grade B or better'")
    missed_s = serializers.FloatField(help_text="covered seconds during which it was missed")
    share = serializers.FloatField(allow_null=True, help_text="share of the covered time meeting it")


class SloWindowSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=list(slo_windows.STATUSES),
        help_text="breaching: the error budget burns fast enough that someone should look now "
        "(a page pair fires), or the covered time's good share is under the objective; at_risk: "
        "it burns faster than it lasts (a ticket pair fires); meeting: neither, with at least "
        "1 h covered; no_data: nothing covered, or too little to judge yet (status_label 'too "
        "little data yet'; reason says how much is covered of how much is needed)",
    )
    status_label = serializers.CharField(
        help_text="the status in words: 'breaching', 'at risk', 'meeting', 'no data', 'too little data yet'")
    reason = serializers.CharField(help_text="one sentence: why the status is what it is")
    meaning = serializers.CharField(help_text="the status in plain words, beside its SRE term")
    judged_after_s = serializers.FloatField(
        help_text="covered seconds needed before a good share under the objective reads breaching: "
        "half the long span of the fastest burn-rate pair that can fire at the objective")
    objective = serializers.FloatField()
    window_s = serializers.FloatField()
    covered_s = serializers.FloatField(help_text="seconds some succeeded scan stands for")
    uncovered_s = serializers.FloatField(help_text="seconds no scan covers: neither good nor bad")
    covered_share = serializers.FloatField(help_text="covered_s ÷ window_s")
    good_s = serializers.FloatField()
    bad_s = serializers.FloatField(help_text="covered seconds missing a target (down included)")
    good_share = serializers.FloatField(
        allow_null=True, help_text="good share of the covered time; null when nothing is covered"
    )
    budget_s = serializers.FloatField(help_text="(1 − objective) × the window")
    budget_left_s = serializers.FloatField(help_text="budget_s − bad_s; below 0 when spent")
    budget_spent = serializers.BooleanField()
    allowance = serializers.CharField(help_text="e.g. '99% over 30 days allows 7 h 12 min of bad time'")
    scans = serializers.IntegerField()
    errored = serializers.IntegerField(help_text="errored scans: our side failed, no time covered")
    burn_rates = BurnRateSerializer(many=True)
    alert_windows = AlertWindowSerializer(many=True)
    alert_level = serializers.ChoiceField(
        choices=ALERT_LEVELS, help_text="'page' while a fast pair fires, 'ticket' a slow one"
    )
    targets = SloTargetSerializer(many=True)
    scoring_versions = serializers.ListField(child=serializers.CharField())


class EndpointSloSerializer(serializers.Serializer):
    endpoint = serializers.UUIDField()
    alert_level = serializers.ChoiceField(
        choices=ALERT_LEVELS, help_text="the burn-rate alert sent in the current episode ('' none)"
    )
    windows = SloWindowSerializer(many=True)


def window_dict(window: slo_windows.SloWindow) -> dict:
    words = WindowWords(window)
    return {
        "days": window.days,
        "status": window.status,
        "status_label": words.status_label,
        "reason": words.status_reason,
        "meaning": words.status_meaning,
        "judged_after_s": window.judged_after_s,
        "objective": window.objective,
        "window_s": window.window_s,
        "covered_s": window.covered_s,
        "uncovered_s": window.uncovered_s,
        "covered_share": window.coverage,
        "good_s": window.good_s,
        "bad_s": window.bad_s,
        "good_share": window.share,
        "budget_s": window.budget_s,
        "budget_left_s": window.budget_left_s,
        "budget_spent": window.budget_spent,
        "allowance": words.allowance_text,
        "scans": window.scans,
        "errored": window.errored,
        "burn_rates": [
            {"span": b["span"], "span_s": b["span_s"], "rate": b["rate"], "covered_s": b["covered_s"]}
            for b in words.burn
        ],
        "alert_windows": [
            {
                "level": w["level"],
                "windows": w["label"],
                "long_s": w["long_s"],
                "short_s": w["short_s"],
                "threshold": w["threshold"],
                "long_rate": w["long_rate"],
                "short_rate": w["short_rate"],
                "firing": w["firing"],
                "meaning": w["meaning"],
            }
            for w in words.alert_windows
        ],
        "alert_level": window.alert_level,
        "targets": [
            {"key": t.key, "text": target_label(t), "missed_s": t.missed_s, "share": t.share}
            for t in window.targets
        ],
        "scoring_versions": list(window.versions),
    }


def endpoint_slo(endpoint: Endpoint) -> dict:
    """The endpoint's 7- and 30-day windows now; `endpoint` came through the scoping layer."""
    now = timezone.now()
    windows = [slo_windows.window(endpoint, days, now) for days in slo_windows.WINDOW_DAYS]
    return EndpointSloSerializer(
        {
            "endpoint": endpoint.public_id,
            "alert_level": endpoint.slo_burn_alert,
            "windows": [window_dict(w) for w in windows],
        }
    ).data
