"""The grader: load-tests an OpenAI-compatible streaming endpoint, grades it and writes its report.

No Django here (plain Python, httpx, asyncio). This module is the grader's public surface: the
site imports these names from ``scans.grader``, never from a module inside it (an import
contract in pyproject.toml), so the modules can be split and renamed without touching the site.
Each name is loaded on first use, so importing the package (the `tokvera` command does) loads
nothing until a name is asked for.

    plan = ScanPlan(base_url="http://127.0.0.1:8080/v1", model="m", levels=(1, 4, 16))
    measurement = run_scan(plan, progress=None, connect_guard=None)      # sync
    report = report_from_measurement(plan, measurement)                  # report.json's dict
    html = render_html(report, surface="site")

The `tokvera` subcommands are scans.grader.cli (its ``UsageError`` too).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .apis import APIS
    from .budget import StreamBudget
    from .capacity import (
        DEFAULT_SEARCH_LEVELS,
        MAX_SEARCH_LEVELS,
        MAX_SEARCH_REQUESTS,
        next_search_level,
        search_requests,
        search_worst_waves,
    )
    from .demo_server import MODEL_ID as DEMO_MODEL_ID
    from .figures import ewma, percentile
    from .formatting import check_value as format_check_value
    from .formatting import number as format_number
    from .formatting import percent as format_percent
    from .guarded_backend import ConnectGuard
    from .liveness import OUR_SIDE as PROBE_OUR_SIDE
    from .liveness import LivenessResult, probe_many, probe_plan
    from .load import ProgressCallback
    from .measurement import (
        FAILURE_CLASSES,
        CostFigure,
        GpuReading,
        LevelResult,
        Measurement,
        MetricsProbe,
        ModelsListing,
        RequestRecord,
    )
    from .objective import Slo, SloError
    from .plan import DEFAULT_LEVELS, MAX_LEVEL, PlanError, ScanPlan, default_requests
    from .progress import ScanProgress, progress_text
    from .prompts import (
        PromptSample,
        PromptsFileError,
        load_prompts_file,
        parse_prompts_text,
        repeat_prompt_share,
    )
    from .proof import ImpossibleReport, ReportDisagrees
    from .proof import prove as prove_report
    from .redaction import redact_report, redact_text
    from .report import REPORT_SCHEMA_PATH, regrade, report_from_measurement
    from .report_html import render_html
    from .report_text import (
        cap_text,
        comparability,
        describe_capacity,
        describe_slo,
        goodput_text,
        is_down,
        server_changes,
        server_text,
    )
    from .runner import GC_GEN0_THRESHOLD, LOOP_LAG_THRESHOLD_MS, list_models, run_scan, run_scan_async
    from .scoring import (
        BANDS,
        CHECK_LABELS,
        CHECKS,
        GRADES,
        INSUFFICIENT_EVIDENCE,
        PILLAR_WEIGHTS,
        SCORING_VERSION,
        SCORING_VERSIONS,
        Check,
        check_by_id,
        is_below_floor,
        values_from_checks,
    )
    from .scoring import grade as grade_check_values
    from .stopping import ScanStopped
    from .ticks import decimals as tick_decimals
    from .ticks import nice_ticks
    from .transport import ConnectionRefusedByGuard, ScanTransport, StaleConnectionError
    from .workload import (
        AGENT_PRESET,
        WORKLOAD_PRESETS,
        Dataset,
        DatasetError,
        Workload,
        WorkloadError,
        apply_workload_preset,
        load_dataset,
    )

#: Public name → (module of this package, its name there).
_PUBLIC: dict[str, tuple[str, str]] = {
    # a scan: its plan, running it, what it measured
    **{name: ("plan", name) for name in (
        "DEFAULT_LEVELS", "MAX_LEVEL", "PlanError", "ScanPlan", "default_requests")},
    **{name: ("runner", name) for name in (
        "GC_GEN0_THRESHOLD", "LOOP_LAG_THRESHOLD_MS", "list_models", "run_scan", "run_scan_async")},
    "ProgressCallback": ("load", "ProgressCallback"),
    "ScanProgress": ("progress", "ScanProgress"),
    "progress_text": ("progress", "progress_text"),
    "ScanStopped": ("stopping", "ScanStopped"),
    # liveness probes between scans: the preflight alone, many endpoints at once
    **{name: ("liveness", name) for name in ("LivenessResult", "probe_many", "probe_plan")},
    "PROBE_OUR_SIDE": ("liveness", "OUR_SIDE"),
    "StreamBudget": ("budget", "StreamBudget"),
    "ConnectGuard": ("guarded_backend", "ConnectGuard"),
    **{name: ("transport", name) for name in (
        "ConnectionRefusedByGuard", "ScanTransport", "StaleConnectionError")},
    **{name: ("measurement", name) for name in (
        "FAILURE_CLASSES", "CostFigure", "GpuReading", "LevelResult", "Measurement",
        "MetricsProbe", "ModelsListing", "RequestRecord")},
    # what the load sends
    "APIS": ("apis", "APIS"),
    **{name: ("workload", name) for name in (
        "AGENT_PRESET", "WORKLOAD_PRESETS", "Dataset", "DatasetError", "Workload",
        "WorkloadError", "apply_workload_preset", "load_dataset")},
    **{name: ("prompts", name) for name in (
        "PromptSample", "PromptsFileError", "load_prompts_file", "parse_prompts_text",
        "repeat_prompt_share")},
    # the objective and the capacity search
    "Slo": ("objective", "Slo"),
    "SloError": ("objective", "SloError"),
    **{name: ("capacity", name) for name in (
        "DEFAULT_SEARCH_LEVELS", "MAX_SEARCH_LEVELS", "MAX_SEARCH_REQUESTS", "next_search_level",
        "search_requests", "search_worst_waves")},
    # the grade
    **{name: ("scoring", name) for name in (
        "BANDS", "CHECK_LABELS", "CHECKS", "GRADES", "INSUFFICIENT_EVIDENCE", "PILLAR_WEIGHTS",
        "SCORING_VERSION", "SCORING_VERSIONS", "Check", "check_by_id", "is_below_floor",
        "values_from_checks")},
    "grade_check_values": ("scoring", "grade"),
    # the report, its words and its proof
    "REPORT_SCHEMA_PATH": ("report", "REPORT_SCHEMA_PATH"),
    "report_from_measurement": ("report", "report_from_measurement"),
    "regrade": ("report", "regrade"),
    "render_html": ("report_html", "render_html"),
    **{name: ("report_text", name) for name in (
        "cap_text", "comparability", "describe_capacity", "describe_slo", "goodput_text",
        "is_down", "server_changes", "server_text")},
    "redact_report": ("redaction", "redact_report"),
    "redact_text": ("redaction", "redact_text"),
    "ImpossibleReport": ("proof", "ImpossibleReport"),
    "ReportDisagrees": ("proof", "ReportDisagrees"),
    "prove_report": ("proof", "prove"),
    # figures: computed (figures.py), shown (formatting.py), on a chart's axis (ticks.py)
    "ewma": ("figures", "ewma"),
    "percentile": ("figures", "percentile"),
    "format_check_value": ("formatting", "check_value"),
    "format_number": ("formatting", "number"),
    "format_percent": ("formatting", "percent"),
    "nice_ticks": ("ticks", "nice_ticks"),
    "tick_decimals": ("ticks", "decimals"),
    # the demo server (`tokvera target`)
    "DEMO_MODEL_ID": ("demo_server", "MODEL_ID"),
}

__all__ = [
    "AGENT_PRESET",
    "APIS",
    "BANDS",
    "CHECKS",
    "CHECK_LABELS",
    "DEFAULT_LEVELS",
    "DEFAULT_SEARCH_LEVELS",
    "DEMO_MODEL_ID",
    "FAILURE_CLASSES",
    "GC_GEN0_THRESHOLD",
    "GRADES",
    "INSUFFICIENT_EVIDENCE",
    "LOOP_LAG_THRESHOLD_MS",
    "MAX_LEVEL",
    "MAX_SEARCH_LEVELS",
    "MAX_SEARCH_REQUESTS",
    "PILLAR_WEIGHTS",
    "PROBE_OUR_SIDE",
    "REPORT_SCHEMA_PATH",
    "SCORING_VERSION",
    "SCORING_VERSIONS",
    "WORKLOAD_PRESETS",
    "Check",
    "ConnectGuard",
    "ConnectionRefusedByGuard",
    "CostFigure",
    "Dataset",
    "DatasetError",
    "GpuReading",
    "ImpossibleReport",
    "LevelResult",
    "LivenessResult",
    "Measurement",
    "MetricsProbe",
    "ModelsListing",
    "PlanError",
    "ProgressCallback",
    "PromptSample",
    "PromptsFileError",
    "ReportDisagrees",
    "RequestRecord",
    "ScanPlan",
    "ScanProgress",
    "ScanStopped",
    "ScanTransport",
    "Slo",
    "SloError",
    "StaleConnectionError",
    "StreamBudget",
    "Workload",
    "WorkloadError",
    "apply_workload_preset",
    "cap_text",
    "check_by_id",
    "comparability",
    "default_requests",
    "describe_capacity",
    "describe_slo",
    "ewma",
    "format_check_value",
    "format_number",
    "format_percent",
    "goodput_text",
    "grade_check_values",
    "is_below_floor",
    "is_down",
    "list_models",
    "load_dataset",
    "load_prompts_file",
    "next_search_level",
    "nice_ticks",
    "parse_prompts_text",
    "percentile",
    "progress_text",
    "probe_many",
    "probe_plan",
    "prove_report",
    "redact_report",
    "redact_text",
    "regrade",
    "render_html",
    "repeat_prompt_share",
    "report_from_measurement",
    "run_scan",
    "run_scan_async",
    "search_requests",
    "search_worst_waves",
    "server_changes",
    "server_text",
    "tick_decimals",
    "values_from_checks",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept in this module)."""
    try:
        module, attribute = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
