"""The endpoint form: validation at the edge, secrets write-only.

Secrets (the API key, the prompt sample, the load dataset) are accepted, encrypted and never
rendered back: their inputs are password fields that do not echo a value, even when the form
is shown again with errors, and the page only says whether one is stored. A blank secret field
keeps what is stored; a "clear" box removes it. Changing a URL whose secret is stored follows
scans/guarded_urls.py: members are refused, and a new origin drops the secret. Where alerts go
is the team's notification channels (scans/channels/): all of them, or those picked here.
"""

from __future__ import annotations

import re
from typing import cast

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from accounts.validators import validate_one_line
from scans import endpoint_limits, endpoints, profile, scheduling
from scans.grader.plan import DEFAULT_LEVELS, MAX_LEVEL, PlanError
from scans.grader.prompts import PromptsFileError, parse_prompts_text
from scans.grader.slo import DEFAULT_SEARCH_LEVELS
from scans.grader.workload import DatasetError
from scans.guarded_urls import GuardedURL
from scans.models import MAX_INTERVAL_MINUTES, MIN_INTERVAL_MINUTES, Endpoint, NotificationChannel

__all__ = ["MAX_PROMPT_SAMPLE_BYTES", "EndpointForm"]

MAX_PROMPT_SAMPLE_BYTES = 5 * 1024 * 1024
MAX_SECRET_CHARS = 4000


def _formfield(model_field, **kwargs):
    if isinstance(model_field, models.URLField):
        kwargs["assume_scheme"] = "https"  # a URL typed without a scheme is read as https
    return model_field.formfield(**kwargs)


class ChannelChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj) -> str:
        off = "" if obj.enabled else ", turned off"
        return f"{obj.name} ({obj.get_kind_display()}{off})"


class EndpointForm(forms.ModelForm):
    levels_text = forms.CharField(
        label="Concurrency levels", max_length=200,
        help_text="Comma-separated, starting at 1 and ascending, e.g. 1, 4, 16.")
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
        label="Load dataset", required=False,
        help_text="Prompts the load sends instead of built-in ones, as tokvera scan --dataset "
                  'reads them: JSONL, one {"prompt": "..."} or {"messages": [...]} per line '
                  f"(UTF-8, at most {profile.SITE_MAX_DATASET_BYTES // (1024 * 1024)} MB, "
                  f"{profile.SITE_MAX_DATASET_PROMPTS:,} prompts). Stored encrypted, never "
                  "shown again.")
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
            "name", "base_url", "model", "mode", "requests_per_level", "max_tokens",
            "timeout_s", "interval_minutes", "enabled", "accepts_pushes", "price_input_per_mtok",
            "price_output_per_mtok", "input_tokens", "output_tokens", "shared_prefix_tokens",
            "warmup", "slo_grade_floor", "slo_ttft_p95_ms", "slo_error_rate",
            "slo_objective", "all_channels", "alert_after_errors", *endpoints.CAPACITY_FIELDS,
        ]
        labels = {
            "base_url": "Base URL",
            "requests_per_level": "Requests per level",
            "timeout_s": "Timeout per request (s)",
            "interval_minutes": "Scan every (minutes)",
            "accepts_pushes": "Also accept pushed reports",
            "price_input_per_mtok": "Price per million input tokens (USD)",
            "price_output_per_mtok": "Price per million output tokens (USD)",
            "slo_grade_floor": "SLO: grade at least",
            "slo_ttft_p95_ms": "SLO: TTFT p95 at concurrency 1 at most (ms)",
            "slo_error_rate": "SLO: error rate at most (share)",
            "slo_objective": "SLO objective (share of the covered time)",
            "all_channels": "Alert every channel of the team",
            "alert_after_errors": "Alert after this many errored scans in a row",
            "input_tokens": "Prompt length (tokens)",
            "output_tokens": "Reply length (tokens)",
            "shared_prefix_tokens": "Shared prefix (tokens)",
            "warmup": "Warm-up requests per level",
            "capacity_search": "Find the capacity within the SLO",
            "capacity_search_levels": "Capacity search: at most this many extra levels",
            "capacity_alert_below": "Alert when the capacity drops below (streams)",
        }
        help_texts = {
            "capacity_search": "After the levels, each scan searches for the most concurrent "
                               "streams that meet the TTFT and error-rate targets above (95% of "
                               "requests within them). Not graded. The search's requests count "
                               "against the site's per-scan limits.",
            "capacity_search_levels": "From 1 to 16 (default 8); at most "
                                      f"{profile.SITE_MAX_LEVEL} streams.",
            "capacity_alert_below": "One alert when a scan finds fewer, one when it recovers. "
                                    "Blank: no capacity alert.",
            "base_url": "The OpenAI-compatible API root, e.g. https://llm.example.com/v1.",
            "model": "As the server names it at /models: Test connection lists them.",
            "requests_per_level": "Blank: at least 20, and four rounds of each level.",
            "interval_minutes": f"From {MIN_INTERVAL_MINUTES} minutes to 24 hours "
                                f"({MAX_INTERVAL_MINUTES}).",
            "slo_error_rate": "0.01 is 1%. Blank: no error-rate target.",
            "slo_ttft_p95_ms": "Blank: no TTFT target.",
            "slo_objective": (
                "0.9 means 90% of the time scans cover in a window must meet every target "
                "(30 days at 0.9 allow 3 days of bad time)."
            ),
            "input_tokens": f"Each prompt is this long as the server counts it (at most "
                            f"{profile.SITE_MAX_INPUT_TOKENS:,}). Blank: built-in prompts "
                            "or the dataset's.",
            "output_tokens": f"Every reply this long (at most {profile.SITE_MAX_OUTPUT_TOKENS:,}"
                             "), where the server accepts ignore_eos or min_tokens; it replaces "
                             "max tokens. Blank: replies end where the model stops.",
            "shared_prefix_tokens": "The first tokens of every prompt are the same (a system "
                                    "prompt); below the prompt length. Blank: none.",
            "warmup": f"Requests sent before each level, not counted (at most "
                      f"{profile.SITE_MAX_WARMUP}). Blank: none.",
        }

    def __init__(self, *args, can_manage: bool = False, team=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.team = team  # a new endpoint's team: the endpoint cap is checked against it
        self.can_manage = can_manage  # owners and admins may move a URL with a stored secret
        self._dropped: list[GuardedURL] = []  # the URLs whose secret a new origin removes
        self.dropped_secrets: list[str] = []  # their labels, once saved
        self.fields["interval_minutes"].validators += [
            MinValueValidator(MIN_INTERVAL_MINUTES), MaxValueValidator(MAX_INTERVAL_MINUTES)]
        self.fields["interval_minutes"].widget.attrs.update(
            min=MIN_INTERVAL_MINUTES, max=MAX_INTERVAL_MINUTES)
        self.fields["base_url"].error_messages["invalid"] = (
            "Expected an http(s) URL such as https://host/v1.")
        self.fields["name"].validators.append(validate_one_line)
        self.fields["requests_per_level"].validators.append(MinValueValidator(1))
        self.fields["max_tokens"].validators.append(MinValueValidator(1))
        self.fields["capacity_search_levels"].required = False  # blank: the default
        self.fields["capacity_alert_below"].validators.append(MinValueValidator(1))
        for name in ("input_tokens", "output_tokens", "shared_prefix_tokens"):
            self.fields[name].validators.append(MinValueValidator(1))
        for name in ("price_input_per_mtok", "price_output_per_mtok", "slo_ttft_p95_ms"):
            self.fields[name].validators.append(MinValueValidator(0))
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

    def clean_slo_error_rate(self):
        value = self.cleaned_data["slo_error_rate"]
        if value is not None and not 0 <= value <= 1:
            raise forms.ValidationError("Expected a share between 0 and 1 (0.01 is 1%).")
        return value

    def clean_capacity_search_levels(self) -> int:
        value = self.cleaned_data.get("capacity_search_levels")
        return DEFAULT_SEARCH_LEVELS if value is None else value

    def clean_slo_objective(self):
        value = self.cleaned_data["slo_objective"]
        if value is None or not 0 < value <= 1:
            raise forms.ValidationError("Expected a share above 0 and at most 1 (0.9 is 90%).")
        return value

    def clean_timeout_s(self):
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
        if upload.size > profile.SITE_MAX_DATASET_BYTES:
            raise forms.ValidationError(
                f"The dataset is larger than {profile.SITE_MAX_DATASET_BYTES // (1024 * 1024)} MB.")
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

    def _new_load_dataset(self, cleaned) -> dict:
        """The dataset the profile will have: a new upload's text, none, or the stored one."""
        if cleaned.get("clear_load_dataset"):
            return {"load_dataset": ""}
        if cleaned.get("load_dataset"):
            return {"load_dataset": cleaned["load_dataset"]}
        return {"load_dataset_encrypted": self.instance.load_dataset_encrypted}

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean() returns, typed without None
        if cleaned.get("api_key") and cleaned.get("clear_api_key"):
            self.add_error("api_key", "Either give a new key or remove the stored one, not both.")
        if cleaned.get("load_dataset") and cleaned.get("clear_load_dataset"):
            self.add_error("load_dataset",
                           "Either give a new dataset or remove the stored one, not both.")
        if self.instance.pk is None and self.team is not None:
            try:
                endpoint_limits.check_room_for_endpoint(self.team.pk)
            except endpoint_limits.TooManyEndpoints as exc:
                message = str(exc)
                raise forms.ValidationError(f"{message[0].upper()}{message[1:]}.") from None
        if self.errors:
            return cleaned
        self._check_url_changes(cleaned)
        if self.errors:
            return cleaned
        try:
            endpoints.check_profile({
                "base_url": cleaned["base_url"], "model": cleaned.get("model", ""),
                "levels": cleaned["levels_text"],
                "requests_per_level": cleaned.get("requests_per_level"),
                "max_tokens": cleaned.get("max_tokens") or 0, "timeout_s": cleaned["timeout_s"],
                "price_input_per_mtok": cleaned.get("price_input_per_mtok"),
                "price_output_per_mtok": cleaned.get("price_output_per_mtok"),
                **{name: cleaned.get(name) for name in endpoints.WORKLOAD_FIELDS},
                **{name: cleaned.get(name) for name in ("slo_ttft_p95_ms", "slo_error_rate")},
                **{name: cleaned.get(name) for name in endpoints.CAPACITY_FIELDS},
                **self._new_load_dataset(cleaned)})
        except PlanError as exc:
            field = _profile_error_field(str(exc))
            if field is None:
                raise forms.ValidationError(f"This scan profile cannot run: {exc}.") from None
            self.add_error(field, f"This scan profile cannot run: {exc}.")
        return cleaned

    def _check_url_changes(self, cleaned) -> None:
        given = set()
        if cleaned.get("api_key") or cleaned.get("clear_api_key"):
            given.add("api_key_encrypted")
        if cleaned.get("load_dataset") or cleaned.get("clear_load_dataset"):
            given.add("load_dataset_encrypted")
        if cleaned.get("prompt_sample"):
            given.add("prompt_sample_encrypted")
        changes = endpoints.url_changes(
            self.instance,
            {"base_url": cleaned["base_url"]},
            given, self.can_manage)
        for field_name, message in changes.refused.items():
            self.add_error(field_name, message)
        self._dropped = changes.dropped

    def clean_locations_text(self) -> list[str]:
        try:
            return scheduling.clean_locations(self.cleaned_data["locations_text"])
        except scheduling.UnknownLocation as exc:
            raise forms.ValidationError(f"{str(exc).capitalize()}.") from None

    # -- saving ---------------------------------------------------------------------------------
    def save(self, commit: bool = True) -> Endpoint:
        endpoint = super().save(commit=False)
        cleaned = self.cleaned_data
        endpoint.levels = cleaned["levels_text"]
        endpoint.locations = cleaned["locations_text"]
        # The URL moved to another origin: its secret stays behind.
        self.dropped_secrets += endpoints.drop_secrets(endpoint, self._dropped)
        if cleaned.get("clear_api_key"):  # a blank field keeps the stored key
            endpoints.set_secret(endpoint, "api_key", "")
        elif cleaned.get("api_key"):
            endpoints.set_secret(endpoint, "api_key", cleaned["api_key"])
        if cleaned.get("prompt_sample"):
            endpoints.set_secret(endpoint, "prompt_sample", cleaned["prompt_sample"])
        if cleaned.get("clear_load_dataset"):
            endpoints.set_secret(endpoint, "load_dataset", "")
        elif cleaned.get("load_dataset"):
            endpoints.set_secret(endpoint, "load_dataset", cleaned["load_dataset"])
        if commit:
            # Only what this form owns: alert state, badge key and manual-scan time are
            # written by workers and other pages meanwhile.
            endpoints.save(endpoint, self.initial.get("interval_minutes"),
                           [*self.Meta.fields, *FORM_EXTRA_FIELDS])
            self.save_channels(endpoint)
        else:
            scheduling.apply_schedule(endpoint, self.initial.get("interval_minutes"))
        return endpoint

    def save_channels(self, endpoint: Endpoint) -> None:
        """The picked channels (a new endpoint's too: the view saves it first)."""
        endpoint.channels.set(self.cleaned_data.get("channels") or [])


# The form's first section (name, URL, key, model, then Test connection); the rest is "advanced".
# An error of the whole profile (shown at the top) opens "advanced" too: it is about its fields.
TARGET_FIELDS = ("name", "base_url", "api_key", "clear_api_key", "model")


FORM_EXTRA_FIELDS = ("levels", "locations", "api_key_encrypted", "prompt_sample_encrypted",
                     "load_dataset_encrypted", "next_scan_at")


# A profile error about one workload field is shown at that field (the first word that names
# it in the one-line PlanError); any other stays at the top of the form.
_PROFILE_ERROR_FIELDS = (
    ("shared-prefix", "shared_prefix_tokens"), ("shared prefix", "shared_prefix_tokens"),
    ("input-tokens", "input_tokens"), ("input tokens", "input_tokens"),
    ("output-tokens", "output_tokens"), ("output tokens", "output_tokens"),
    ("warm", "warmup"), ("dataset", "load_dataset"),
    ("capacity alert", "capacity_alert_below"), ("capacity search", "capacity_search"),
)


def _profile_error_field(message: str) -> str | None:
    for word, field in _PROFILE_ERROR_FIELDS:
        if message.lower().startswith(("--" + word, word, "a " + word, "the " + word)):
            return field
    return None

