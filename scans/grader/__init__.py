"""The scanner: load-tests an OpenAI-compatible streaming endpoint and returns raw measurements.

No Django here (plain Python, httpx, asyncio). Public surface:

    plan = ScanPlan(base_url="http://127.0.0.1:8080/v1", model="m", levels=(1, 4, 16))
    measurement = run_scan(plan, progress=None, connect_guard=None)      # sync
    measurement = await run_scan_async(plan, progress=None, transport=None)

`scans.grader.check_values.check_values(measurement)` turns a measurement into check values for scoring;
`scans.grader.report` builds report.json and report.html from them.
"""

from .measurement import (
    FAILURE_CLASSES,
    CostFigure,
    GpuReading,
    LevelResult,
    Measurement,
    MetricsProbe,
    RequestRecord,
)
from .plan import DEFAULT_LEVELS, PlanError, ScanPlan, default_requests
from .prompts import (
    PromptSample,
    PromptsFileError,
    load_prompts_file,
    parse_prompts_text,
    repeat_prompt_share,
)
from .runner import LOOP_LAG_THRESHOLD_MS, ProgressCallback, run_scan, run_scan_async
from .transport import (
    ConnectGuard,
    ConnectionRefusedByGuard,
    ScanTransport,
    StaleConnectionError,
)

__all__ = [
    "DEFAULT_LEVELS",
    "FAILURE_CLASSES",
    "LOOP_LAG_THRESHOLD_MS",
    "ConnectGuard",
    "ConnectionRefusedByGuard",
    "CostFigure",
    "GpuReading",
    "LevelResult",
    "Measurement",
    "MetricsProbe",
    "PlanError",
    "ProgressCallback",
    "PromptSample",
    "PromptsFileError",
    "RequestRecord",
    "ScanPlan",
    "ScanTransport",
    "StaleConnectionError",
    "default_requests",
    "load_prompts_file",
    "parse_prompts_text",
    "repeat_prompt_share",
    "run_scan",
    "run_scan_async",
]
