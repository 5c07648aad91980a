"""The endpoint form: it parses, scans/endpoints/service.py decides and writes.

What a field is called, its bounds, label and help come from its row in
scans/endpoints/profile_fields.py; the form adds what only a page needs (levels and locations
as text, files, boxes that remove a secret) and shows the service's refusals at their fields.

Secrets (the API key, the prompt sample, the load dataset) are accepted, encrypted and never
rendered back: their inputs are password fields that do not echo a value, even when the form
is shown again with errors, and the page only says whether one is stored. A blank secret field
keeps what is stored; a "clear" box removes it. Changing a URL whose secret is stored follows
scans/endpoints/url_rules.py: members are refused, and a new origin drops the secret. Where
alerts go is the team's notification channels (scans/notify/channels/): all of them, or those
picked here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, cast

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from accounts.models import Team
from accounts.validators import validate_one_line
from scans.endpoints import limits, profile, profile_fields, scheduling
from scans.endpoints import service as endpoints
from scans.grader import (
    DEFAULT_LEVELS,
    DEFAULT_SEARCH_LEVELS,
    MAX_LEVEL,
    DatasetError,
    PlanError,
    PromptsFileError,
    parse_prompts_text,
)
from scans.models import MAX_INTERVAL_MINUTES, MIN_INTERVAL_MINUTES, Endpoint, NotificationChannel
from scans.models.endpoints import (
    DEFAULT_CONFIRM_AFTER,
    DEFAULT_PROBE_INTERVAL_S,
    MAX_PROBE_INTERVAL_S,
    MIN_PROBE_INTERVAL_S,
)

__all__ = ["MAX_PROMPT_SAMPLE_BYTES", "EndpointForm"]

MAX_PROMPT_SAMPLE_BYTES = 5 * 1024 * 1024
MAX_SECRET_CHARS = 4000


def _formfield(model_field: models.Field, **kwargs: Any) -> forms.Field | None:
    if isinstance(model_field, models.URLField):
        kwargs["assume_scheme"] = "https"  # a URL typed without a scheme is read as https
    return model_field.formfield(**kwargs)


# The table's rows that are columns of the endpoint (the dataset is a file, stored encrypted).
_TABLE_COLUMNS = tuple(row for row in profile_fields.FIELDS if row.kind != "dataset")
_DATASET = profile_fields.BY_NAME["load_dataset"]


class ChannelChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: NotificationChannel) -> str:
        off = "" if obj.enabled else ", turned off"
        return f"{obj.name} ({obj.get_kind_display()}{off})"


class EndpointForm(forms.ModelForm):
    levels_text = forms.CharField(
        label="Concurrency levels", max_length=200,
        help_text="Comma-separated, starting at 1 and ascending. Default 1, 4, 16: one "
                  "request alone, then a small and a busy batch, to see how latency holds "
                  "under load.")
    locations_text = forms.CharField(
        label="Scan from", max_length=400, required=False,
        help_text="Locations the site scans it from, comma-separated; blank: the site's own.")
    api_key = forms.CharField(
        label="API key", required=False, max_length=MAX_SECRET_CHARS, strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Write-only: stored encrypted, never shown again.")
    clear_api_key = forms.BooleanField(label="Remove the stored API key", required=False)
    prompt_sample = forms.FileField(
        label="Prompt sample", required=False,
        help_text="Your export of real traffic: JSONL or one prompt per line (UTF-8, at most 5 MB). "
                  "Stored encrypted, never sent anywhere; used only for repeat_prompt_share.")
    load_dataset = forms.FileField(
        label=_DATASET.label, required=False, help_text=profile_fields.help_text(_DATASET))
    clear_load_dataset = forms.BooleanField(label="Remove the stored load dataset",
                                            required=False)
    channels = ChannelChoiceField(
        label="Only these channels", required=False, queryset=NotificationChannel.objects.for_team(None),
        to_field_name="public_id", widget=forms.CheckboxSelectMultiple,
        help_text="Used when the box above is off; none ticked: this endpoint sends no alerts.")

    class Meta:
        model = Endpoint
        formfield_callback = _formfield
        fields = [
            "name", "base_url", "model", "mode", "interval_minutes", "enabled", "accepts_pushes",
            *(row.name for row in _TABLE_COLUMNS),
            "slo_grade_floor", "slo_ttft_p95_ms", "slo_error_rate", "slo_objective",
            "all_channels", "alert_after_errors", "probe_interval_s", "confirm_after",
            "renotify_minutes",
        ]
        labels = {
            **{row.name: row.label for row in _TABLE_COLUMNS},
            "base_url": "Base URL",
            "interval_minutes": "Scan every (minutes)",
            "accepts_pushes": "Also accept pushed reports",
            "slo_grade_floor": "SLO: grade at least",
            "slo_ttft_p95_ms": "SLO: TTFT p95 at concurrency 1 at most (ms)",
            "slo_error_rate": "SLO: error rate at most (share)",
            "slo_objective": "SLO objective (share of the covered time)",
            "all_channels": "Alert every channel of the team",
            "alert_after_errors": "Alert after this many errored scans in a row",
            "probe_interval_s": "Liveness probe every (seconds)",
            "confirm_after": "Confirm a change after this many results in a row",
            "renotify_minutes": "While down, remind every (minutes)",
        }
        help_texts = {
            **{row.name: profile_fields.help_text(row) for row in _TABLE_COLUMNS if row.help},
            "base_url": "The OpenAI-compatible API root, e.g. https://llm.example.com/v1.",
            "model": "As the server names it at /models: Test connection lists them.",
            "interval_minutes": f"Default 60: a graded scan puts real load on the server, so once "
                                "an hour; the liveness probe below watches in between. From "
                                f"{MIN_INTERVAL_MINUTES} minutes to 24 hours "
                                f"({MAX_INTERVAL_MINUTES}), and no shorter than a scan takes: "
                                "a slot whose previous scan is still running is skipped.",
            "mode": "Scheduled (the default): the site scans it. Pushed: you scan it from inside "
                    "your network with tokvera scan --publish and the site keeps the reports.",
            "enabled": "On by default; off pauses scans and probes and keeps the history.",
            "slo_grade_floor": (
                "Default B: a healthy server on the default profile grades A, so one letter of "
                "room; below it (confirmed, see below) alerts and counts as bad SLO time."),
            "alert_after_errors": (
                "Default 3: scans that failed on our side (not the endpoint's fault) alert only "
                "when they keep failing."),
            "probe_interval_s": (
                f"Between graded scans the site checks the endpoint answers: /models and one "
                f"short streamed request, no load. From {MIN_PROBE_INTERVAL_S} s to "
                f"{MAX_PROBE_INTERVAL_S // 60} min; default {DEFAULT_PROBE_INTERVAL_S} s, so an "
                "outage is noticed within about two probes."),
            "confirm_after": (
                "Down, up again and unreachable from a location (probes), below the floor and "
                "back (graded scans) alert only when this many results in a row agree "
                f"(default {DEFAULT_CONFIRM_AFTER}: one lost request never pages anyone; a first "
                "bad scan brings the next one forward). 1 alerts on the first bad result."),
            "renotify_minutes": "Blank: one message per outage (and one when it ends).",
            "slo_error_rate": "0.01 is 1%. Blank: no error-rate target.",
            "slo_ttft_p95_ms": "Blank (the default): no TTFT target; the grade's own bounds "
                               "still judge TTFT.",
            "slo_objective": (
                "Default 0.9: 90% of the time scans cover in a window must meet every target "
                "(30 days at 0.9 allow 3 days of bad time), so a few bad scans spend budget "
                "without paging anyone."
            ),
        }

    def __init__(self, *args: Any, team: Team | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A new endpoint's team: its channels. Who may move a URL with a stored secret is the
        # service's to decide.
        self.team = team
        self.fields["interval_minutes"].validators += [
            MinValueValidator(MIN_INTERVAL_MINUTES), MaxValueValidator(MAX_INTERVAL_MINUTES)]
        self.fields["interval_minutes"].widget.attrs.update(
            min=MIN_INTERVAL_MINUTES, max=MAX_INTERVAL_MINUTES)
        self.fields["base_url"].error_messages["invalid"] = (
            "Expected an http(s) URL such as https://host/v1.")
        self.fields["name"].validators.append(validate_one_line)
        self.fields["capacity_search_levels"].required = False  # blank: the default
        for name in ("probe_interval_s", "confirm_after", "api"):
            self.fields[name].required = False  # blank: the default
        for row in _TABLE_COLUMNS:
            column = Endpoint._meta.get_field(row.name)
            _bound(self.fields[row.name], row, getattr(column, "validators", []))
        self.fields["slo_ttft_p95_ms"].validators.append(MinValueValidator(0))
        levels = (self.instance.levels if self.instance.pk and self.instance.levels
                  else list(DEFAULT_LEVELS))
        self.fields["levels_text"].initial = ", ".join(str(level) for level in levels)
        self.fields["locations_text"].initial = ", ".join(self.instance.locations or [])
        self.fields["locations_text"].help_text += (
            " Available: " + ", ".join(scheduling.configured_locations()) + ".")
        self.fields["model"].widget.attrs.update(list="server-models", autocomplete="off")
        owner = self.instance.team_id if self.instance.pk else getattr(team, "pk", None)
        cast(ChannelChoiceField, self.fields["channels"]).queryset = (
            NotificationChannel.objects.for_team(owner))
        if self.instance.pk:
            self.fields["channels"].initial = list(self.instance.channels.values_list(
                "public_id", flat=True))
        if self.instance.pk:  # only an edit has something stored to keep
            self.fields["api_key"].help_text = (
                ("An API key is stored. " if self.instance.has_api_key else "No API key stored. ")
                + self.fields["api_key"].help_text + " Leave blank to keep the stored key.")
            self.fields["prompt_sample"].help_text += " Leave empty to keep the stored sample."
            self.fields["load_dataset"].help_text += " Leave empty to keep the stored dataset."

    @property
    def workload_fields(self) -> list:
        """The workload's API, agent switch and numbers, in the table's order (the template's
        "Workload" fieldset; the dataset is a file, shown after them)."""
        return [self[row.name] for row in profile_fields.group("workload")
                if row.kind != "dataset"]

    @property
    def errors_outside_target(self) -> bool:
        """An error the first section does not show: the "advanced" section opens for it."""
        return any(name not in TARGET_FIELDS for name in self.errors)

    # -- fields ---------------------------------------------------------------------------------
    def clean_levels_text(self) -> list[int]:
        raw = self.cleaned_data["levels_text"]
        parts = [p for p in re.split(r"[\s,]+", raw.strip()) if p]
        if not parts or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
            raise forms.ValidationError("Enter whole numbers separated by commas, e.g. 1, 4, 16.")
        levels = [int(p) for p in parts]
        if levels[0] != 1:
            raise forms.ValidationError("The levels must start at 1 (one request at a time).")
        if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
            raise forms.ValidationError("The levels must be strictly ascending.")
        if levels[-1] > MAX_LEVEL:
            raise forms.ValidationError(f"A level can be at most {MAX_LEVEL}.")
        return levels

    def clean_base_url(self) -> str:
        try:
            # As typed: Django's URLField would have put http:// in front of a bare host.
            return endpoints.clean_base_url(self.data.get(self.add_prefix("base_url"), ""))
        except endpoints.InvalidURL as exc:
            message = str(exc)
            end = "" if message.endswith("?") else "."
            raise forms.ValidationError(f"{message[0].upper()}{message[1:]}{end}") from None

    def clean_slo_error_rate(self) -> float | None:
        value = self.cleaned_data["slo_error_rate"]
        if value is not None and not 0 <= value <= 1:
            raise forms.ValidationError("Expected a share between 0 and 1 (0.01 is 1%).")
        return value

    def clean_capacity_search_levels(self) -> int:
        value = self.cleaned_data.get("capacity_search_levels")
        return DEFAULT_SEARCH_LEVELS if value is None else value

    def clean_api(self) -> str:
        return self.cleaned_data.get("api") or Endpoint._meta.get_field("api").default

    def clean_probe_interval_s(self) -> int:
        value = self.cleaned_data.get("probe_interval_s")
        return DEFAULT_PROBE_INTERVAL_S if value is None else value

    def clean_confirm_after(self) -> int:
        value = self.cleaned_data.get("confirm_after")
        return DEFAULT_CONFIRM_AFTER if value is None else value

    def clean_slo_objective(self) -> float:
        value = self.cleaned_data["slo_objective"]
        if value is None or not 0 < value <= 1:
            raise forms.ValidationError("Expected a share above 0 and at most 1 (0.9 is 90%).")
        return value

    def clean_timeout_s(self) -> float:
        value = self.cleaned_data["timeout_s"]
        if value is None or not 0 < value <= 3600:
            raise forms.ValidationError("Expected a number of seconds above 0, at most 3600.")
        return value

    def clean_prompt_sample(self) -> str | None:
        upload = self.cleaned_data.get("prompt_sample")
        if not upload:
            return None
        if upload.size > MAX_PROMPT_SAMPLE_BYTES:
            raise forms.ValidationError("The sample is larger than 5 MB.")
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            raise forms.ValidationError(
                "The sample must be UTF-8 text: JSONL or one prompt per line.") from None
        try:  # the same parsing as `tokvera scan --prompts` (JSONL or one prompt per line)
            parse_prompts_text(text, source="The sample")
        except PromptsFileError as exc:
            raise forms.ValidationError(f"{exc}.") from None
        return text

    def clean_load_dataset(self) -> str | None:
        upload = self.cleaned_data.get("load_dataset")
        if not upload:
            return None
        if upload.size > limits.SITE_MAX_DATASET_BYTES:
            raise forms.ValidationError(
                f"The dataset is larger than {limits.SITE_MAX_DATASET_BYTES // (1024 * 1024)} MB.")
        try:
            text = upload.read().decode("utf-8-sig")
        except UnicodeDecodeError:
            raise forms.ValidationError("The dataset must be UTF-8 text (JSONL).") from None
        try:  # the same reader as `tokvera scan --dataset`
            profile.parse_load_dataset(text)
        except DatasetError as exc:
            message = str(exc)
            end = "" if message.endswith("?") else "."
            raise forms.ValidationError(f"{message[0].upper()}{message[1:]}{end}") from None
        return text

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean() returns, typed without None
        if cleaned.get("api_key") and cleaned.get("clear_api_key"):
            self.add_error("api_key", "Either give a new key or remove the stored one, not both.")
        if cleaned.get("load_dataset") and cleaned.get("clear_load_dataset"):
            self.add_error("load_dataset",
                           "Either give a new dataset or remove the stored one, not both.")
        return cleaned

    def clean_locations_text(self) -> list[str]:
        try:
            return scheduling.clean_locations(self.cleaned_data["locations_text"])
        except scheduling.UnknownLocation as exc:
            raise forms.ValidationError(f"{str(exc).capitalize()}.") from None

    # -- what the service is given, and what it refuses --------------------------------------
    def endpoint_data(self) -> dict:
        """The parsed form as scans.endpoints.service takes it: every field of the form (as
        ModelForm put them on its instance), levels and locations, the secrets given (a blank
        field keeps the stored one, a "remove" box gives ""), the channels picked."""
        cleaned = self.cleaned_data
        data = {name: getattr(self.instance, name) for name in self._meta.fields or ()}
        data |= {"levels": cleaned["levels_text"], "locations": cleaned["locations_text"],
                 "channels": [channel.public_id for channel in cleaned.get("channels") or []]}
        for name in ("api_key", "load_dataset"):
            if cleaned.get(f"clear_{name}"):
                data[name] = ""
            elif cleaned.get(name):
                data[name] = cleaned[name]
        if cleaned.get("prompt_sample"):
            data["prompt_sample"] = cleaned["prompt_sample"]
        return data

    def save(self, commit: bool = True) -> Endpoint:
        """Never: a form that saved itself would pass by the service's rules."""
        raise TypeError("endpoints are written by scans.endpoints.service (create, update)")

    def refused(self, exc: Exception) -> None:
        """Show a refusal of the service: at the field it is about, else above the form."""
        message = str(exc)
        if isinstance(exc, endpoints.URLChangeRefused):
            for field_name, why in exc.refused.items():
                self.add_error(field_name, why)
        elif isinstance(exc, PlanError):
            field = profile_fields.field_named_by(message, _SHOWN_AT_THEIR_FIELD)
            self.add_error(field, f"This scan profile cannot run: {message}.")
        elif isinstance(exc, limits.TooManyEndpoints):
            self.add_error(None, f"{message[0].upper()}{message[1:]}.")
        elif isinstance(exc, endpoints.IntervalTooShort):
            self.add_error("interval_minutes", f"{message[0].upper()}{message[1:]}.")
        elif isinstance(exc, endpoints.UnknownChannels):  # deleted while the page was open
            self.add_error("channels", f"{message[0].upper()}{message[1:]}.")
        else:
            raise exc


# The form's first section (name, URL, key, model, then Test connection); the rest is "advanced".
# An error of the whole profile (shown at the top) opens "advanced" too: it is about its fields.
TARGET_FIELDS = ("name", "base_url", "api_key", "clear_api_key", "model")


# A profile error about a workload or capacity field is shown at that field (the first whose
# words begin the one-line PlanError); any other stays at the top of the form.
_SHOWN_AT_THEIR_FIELD = (*profile_fields.group("workload"), *profile_fields.group("capacity"))


def _bound(field: forms.Field, row: profile_fields.ProfileField, model_checks: Iterable[Any]) -> None:
    """The row's bounds on the input (the browser's min and max) and its minimum as a check
    (unless the field or the model column checks it already: one message, not two); a maximum
    is the site's to refuse, in its own words (profile.validate_profile)."""
    field.widget.attrs.update(row.widget_bounds())
    if row.minimum is None or row.above_minimum:
        return  # an exclusive minimum: the field's own clean method words it
    if not any(isinstance(check, MinValueValidator) and check.limit_value == row.minimum
               for check in [*field.validators, *model_checks]):
        field.validators.append(MinValueValidator(row.minimum))
