"""The public benchmark snapshot: one function builds it, three surfaces read it.

`build_snapshot(now)` reads what the coordinator stores (settled jobs, host heartbeats and host
EWMAs) and returns a plain, JSON-ready dict. `/v1/slo` and `/v1/stats` are projections of it
(`slo_payload`, `stats_payload`) and `/benchmarks` renders it, so for the same coordinator clock
the three cannot disagree. docs/methodology.md explains every figure.

- Success rate, per active catalog model and window: completed ÷ (completed + failed) over the
  jobs settled in the window (by `settled_at`, now − window < settled_at ≤ now), rounded to
  6 decimals. Unsettled jobs never count. `failed` is the jobs a host failed (or that ran out
  of attempts); a job no host took before the queue deadline (`no_host`) is counted on its
  own, as `no_host`, and not in the rate: it says how much work found no host, which one
  buyer's burst can make as large as it likes, not how hosts ran the jobs they took.
- Completion latency: nearest-rank p50 / p95 of `completed_at − created_at` over the completed
  jobs of that window, in whole milliseconds.
- Online hosts: `Host.online_q(now)`, the coordinator's own rule (heartbeat at most 45 s old,
  not suspended, token not revoked), joined to the catalog ids each host advertises.
- Per trust tier: nearest-rank p50 / p95 of the online hosts' `ttft_ewma_ms` and p50 of their
  `tps_ewma` (hosts without an EWMA yet count as hosts but give no sample). A cell is published
  only when at least MIN_HOSTS_PER_CELL hosts of at least MIN_OPERATORS teams gave a sample.
- Hardware: online hosts per reported GPU name; a name reported by hosts of fewer than
  MIN_OPERATORS teams is counted only in the "other" row.

Every published figure is rounded by `half_up`, the one rounding rule (40.25 -> 40.3).

A figure with no samples is None (an em dash on the page, null in JSON), never 0 or 1.
The percentiles are computed in PostgreSQL with `percentile_disc`, which is nearest-rank (the
rule of `scans.grader.percentile`; tests hold the two to the same cases). Only the columns named
here are read: never request or result bodies.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, TypedDict, overload

from django.db import connection, transaction

from benchmarks import policy
from benchmarks.models import CatalogModel, Host, Job, JobStatus, TrustLevel
from benchmarks.network.jobs import REASON_NO_HOST
from benchmarks.network.system_wide import ALL_HOSTS, ALL_JOBS
from scans.grader import ewma

__all__ = [
    "EWMA_ALPHA", "LATENCY_PERCENTILES", "TIERS", "TTFT_PERCENTILES", "WINDOWS",
    "build_snapshot", "half_up", "online_window_s", "slo_payload", "stats_payload",
]

# Trailing windows for success and completion latency, by the name the JSON uses.
WINDOWS: dict[str, timedelta] = {"7d": timedelta(days=7), "30d": timedelta(days=30)}
# The window whose settled jobs decide whether the network is too sparse to say anything.
SPARSE_WINDOW = "7d"
LATENCY_PERCENTILES = (50, 95)
TTFT_PERCENTILES = (50, 95)
TPS_PERCENTILE = 50
# Every trust level, hardware included: a hardware row with 0 hosts is expected.
TIERS: tuple[str, ...] = tuple(level.value for level in TrustLevel)
# The host EWMAs are folded with scans.grader.ewma's default α (benchmarks/network/ewma.py passes none).
EWMA_ALPHA: float = inspect.signature(ewma).parameters["alpha"].default
SUCCESS_DECIMALS = 6
TPS_DECIMALS = 1
# Privacy floors, counted by operator (the team that runs a host): a GPU name, or a tier's TTFT /
# speed cell, is published only when hosts of at least MIN_OPERATORS teams stand behind it (and,
# for a cell, at least MIN_HOSTS_PER_CELL hosts with a sample), so no figure is one operator's own.
MIN_OPERATORS = 2
MIN_HOSTS_PER_CELL = 2
OTHER_GPUS = "other"

_US_PER_MS = 1000


def online_window_s() -> int:
    """The coordinator's online rule, in seconds (benchmarks.policy, used by Host.online_q)."""
    return int(policy.value("NETWORK_ONLINE_WINDOW_S"))


def _iso(now: datetime) -> str:
    return now.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@overload
def half_up(value: None, decimals: int = 0) -> None: ...
@overload
def half_up(value: int | float | Decimal | Fraction, decimals: Literal[0] = 0) -> int: ...
@overload
def half_up(value: int | float | Decimal | Fraction | None, decimals: int = 0) -> int | float | None: ...
def half_up(value: int | float | Decimal | Fraction | None, decimals: int = 0) -> int | float | None:
    """The one rounding rule of every published figure: half up, on the decimal a reader sees
    (40.25 -> 40.3, 200.5 -> 201), never float `round`'s half-to-even on binary values.
    Whole numbers come back as int, others as float; None stays None."""
    if value is None:
        return None
    if isinstance(value, float):
        value = Decimal(repr(value))  # the shortest decimal that reads back as this float
    scaled = math.floor(Fraction(value) * 10**decimals + Fraction(1, 2))
    return scaled if decimals == 0 else scaled / 10**decimals


def _whole_ms_from_us(microseconds: int | None) -> int | None:
    """Whole milliseconds, half up, from an exact count of microseconds."""
    return None if microseconds is None else half_up(Fraction(microseconds, _US_PER_MS))


def _success(completed: int, failed: int) -> float | None:
    settled = completed + failed
    return None if settled == 0 else half_up(Fraction(completed, settled), SUCCESS_DECIMALS)


# --- jobs: success and completion latency -----------------------------------------------------


def _empty_window() -> dict:
    return {"completed": 0, "failed": 0, "success_rate": None,
            "latency": {f"p{p}_ms": None for p in LATENCY_PERCENTILES}, "no_host": 0}


def _window(completed: int, failed: int, no_host: int, latencies_us: list[int | None]) -> dict:
    return {"completed": completed, "failed": failed, "success_rate": _success(completed, failed),
            "latency": {f"p{p}_ms": _whole_ms_from_us(us)
                        for p, us in zip(LATENCY_PERCENTILES, latencies_us, strict=True)},
            "no_host": no_host}


# Run with the job-window query (SET LOCAL, inside its transaction). The percentile sorts of a
# busy model hold about a million values: keep them in memory. The plan is index-only scans; JIT
# compilation costs more than it saves.
JOB_WINDOWS_SETTINGS = ("SET LOCAL work_mem = '128MB'", "SET LOCAL jit = off")


def job_windows_query(model_ids: list[str], now: datetime) -> tuple[str, list]:
    """The SQL and parameters of the job-window query (the benchmark EXPLAINs exactly this).

    One branch per model, joined by UNION ALL: each is an index-only scan of that model's jobs
    settled in the longest window (benchmarks_job's job_public_windows_idx), with one FILTER per
    window and percentile_disc (nearest-rank) for the latencies. Failures split on
    `failure_reason`: `no_host` ones are counted apart from the hosts' own (the index covers
    it). Ordered-set aggregates cannot be split between workers, but separate branches can:
    PostgreSQL runs them side by side (Parallel Append), so the busiest model no longer waits
    for all the others.
    """
    table = Job._meta.db_table
    fractions = [p / 100 for p in LATENCY_PERCENTILES]
    longest = max(WINDOWS.values())
    columns, column_params = [], []
    for span in WINDOWS.values():
        since = now - span
        columns += [
            "count(*) FILTER (WHERE status = %s AND settled_at > %s)",
            "count(*) FILTER (WHERE status = %s AND settled_at > %s AND failure_reason <> %s)",
            "count(*) FILTER (WHERE status = %s AND settled_at > %s AND failure_reason = %s)",
            # Seconds as float8: ordered exactly like the interval, sorted faster, and exact to
            # the microsecond for any latency below a few years.
            "percentile_disc(%s::float8[]) WITHIN GROUP "
            "(ORDER BY date_part('epoch', completed_at - created_at))"
            " FILTER (WHERE status = %s AND completed_at IS NOT NULL AND settled_at > %s)",
        ]
        column_params += [JobStatus.COMPLETED.value, since,
                          JobStatus.FAILED.value, since, REASON_NO_HOST,
                          JobStatus.FAILED.value, since, REASON_NO_HOST,
                          fractions, JobStatus.COMPLETED.value, since]
    branch = (
        f"(SELECT model_id, {', '.join(columns)} FROM {table} "  # noqa: S608 - names from code
        "WHERE model_id = %s AND settled_at > %s AND settled_at <= %s GROUP BY model_id)"
    )
    sql = " UNION ALL ".join([branch] * len(model_ids))
    params = [p for model_id in model_ids for p in (*column_params, model_id, now - longest, now)]
    return sql, params


def _job_windows_sql(model_ids: list[str], now: datetime) -> dict[str, dict[str, dict]]:
    """Success and latency per model and window, computed in PostgreSQL (job_windows_query)."""
    if not model_ids:
        return {}
    sql, params = job_windows_query(model_ids, now)
    found: dict[str, dict[str, dict]] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in JOB_WINDOWS_SETTINGS:
            cursor.execute(setting)
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            model_id, values = row[0], row[1:]
            found[model_id] = {}
            for i, name in enumerate(WINDOWS):
                completed, failed, no_host, seconds = values[4 * i: 4 * i + 4]
                latencies_us = ([round(s * 1_000_000) for s in seconds] if seconds
                                else [None] * len(LATENCY_PERCENTILES))
                found[model_id][name] = _window(completed, failed, no_host, latencies_us)
    return found


# --- hosts: online, per tier, hardware --------------------------------------------------------


class OnlineHost(TypedDict):
    id: int
    team_id: int
    gpu_model: str


def _online_hosts(now: datetime) -> list[OnlineHost]:
    return list(
        ALL_HOSTS.filter(Host.online_q(now))  # the public page aggregates every operator's hosts
        .order_by()
        .values("id", "team_id", "gpu_model")
    )


def _adverts(now: datetime, model_ids: list[str]) -> dict[str, set[int]]:
    """Catalog id → ids of the online hosts that advertise it (the heartbeat's list, as rows)."""
    through = Host.catalog_models.through
    pairs = (
        through.objects.filter(catalogmodel_id__in=model_ids,
                               host__in=ALL_HOSTS.filter(Host.online_q(now)))
        .order_by()
        .values_list("catalogmodel_id", "host_id")
    )
    found: dict[str, set[int]] = defaultdict(set)
    for model_id, host_id in pairs:
        found[model_id].add(host_id)
    return found


def _enough(hosts: int, operators: int) -> bool:
    """The privacy floor of a tier cell: several hosts, run by several teams."""
    return hosts >= MIN_HOSTS_PER_CELL and operators >= MIN_OPERATORS


def _tier_row(tier: str, hosts: int, ttft: list[float | None], tps: float | None,
              ttft_hosts: int = 0, ttft_operators: int = 0,
              tps_hosts: int = 0, tps_operators: int = 0) -> dict:
    if not _enough(ttft_hosts, ttft_operators):
        ttft = [None] * len(TTFT_PERCENTILES)
    if not _enough(tps_hosts, tps_operators):
        tps = None
    row = {"tier": tier, "hosts": hosts}
    row.update({f"ttft_p{p}_ms": half_up(v) for p, v in zip(TTFT_PERCENTILES, ttft, strict=True)})
    row[f"tps_p{TPS_PERCENTILE}"] = half_up(tps, TPS_DECIMALS)
    return row


def _tiers_sql(model_ids: list[str], now: datetime) -> dict[str, list[dict]]:
    """Per model and tier, percentile_disc over the online hosts' EWMAs (NULLs are ignored), with
    how many hosts and distinct operating teams gave each figure a sample (the privacy floor)."""
    through = Host.catalog_models.through._meta.db_table
    hosts = Host._meta.db_table
    online_sql, online_params = (
        ALL_HOSTS.filter(Host.online_q(now)).order_by().values("id")
        .query.sql_with_params())
    sql = (
        f"SELECT a.catalogmodel_id, h.trust_level, count(*), "  # noqa: S608 - names from code
        "percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY h.ttft_ewma_ms), "
        "percentile_disc(%s::float8) WITHIN GROUP (ORDER BY h.tps_ewma), "
        "count(h.ttft_ewma_ms), count(DISTINCT h.team_id) FILTER (WHERE h.ttft_ewma_ms IS NOT NULL), "
        "count(h.tps_ewma), count(DISTINCT h.team_id) FILTER (WHERE h.tps_ewma IS NOT NULL) "
        f"FROM {through} a JOIN {hosts} h ON h.id = a.host_id "
        f"WHERE a.catalogmodel_id = ANY(%s) AND a.host_id IN ({online_sql}) "
        "GROUP BY a.catalogmodel_id, h.trust_level"
    )
    params = [[p / 100 for p in TTFT_PERCENTILES], TPS_PERCENTILE / 100, model_ids, *online_params]
    cells: dict[tuple[str, str], tuple] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for model_id, tier, count, ttft, tps, *floors in cursor.fetchall():
            cells[model_id, tier] = (count, ttft or [None] * len(TTFT_PERCENTILES), tps, *floors)
    empty = (0, [None] * len(TTFT_PERCENTILES), None)
    return {model_id: [_tier_row(tier, *cells.get((model_id, tier), empty)) for tier in TIERS]
            for model_id in model_ids}


def _gpu_name(reported: str | None) -> str | None:
    return " ".join((reported or "").split()) or None


def _hardware(hosts: list[OnlineHost]) -> list[dict]:
    """Online hosts per reported GPU, most hosts first (then by name), then "other", then null
    (hosts that reported none).

    `gpu_model` is free text chosen by the host, so a name is published only when hosts of at
    least MIN_OPERATORS teams report it; any other name is counted only in the "other" row: a
    name one operator's hosts report would single that operator out, or carry whatever it typed
    (a team name, an email). A host that reports "other" itself is counted there too."""
    hosts_per_gpu: Counter = Counter()
    teams_per_gpu: dict[str | None, set[int]] = defaultdict(set)
    for host in hosts:
        gpu = _gpu_name(host["gpu_model"])
        hosts_per_gpu[gpu] += 1
        teams_per_gpu[gpu].add(host["team_id"])
    named = {gpu: n for gpu, n in hosts_per_gpu.items()
             if gpu is not None and gpu.casefold() != OTHER_GPUS
             and len(teams_per_gpu[gpu]) >= MIN_OPERATORS}
    folded = sum(n for gpu, n in hosts_per_gpu.items() if gpu is not None and gpu not in named)
    rows = [{"gpu": gpu, "hosts": n} for gpu, n in sorted(named.items(), key=lambda g: (-g[1], g[0]))]
    if folded:
        rows.append({"gpu": OTHER_GPUS, "hosts": folded})
    if hosts_per_gpu[None]:
        rows.append({"gpu": None, "hosts": hosts_per_gpu[None]})
    return rows


def gpu_models_online(hardware: list[dict]) -> int:
    """How many GPU names the hardware list publishes: not the "other" row, not null."""
    return sum(1 for row in hardware if row["gpu"] not in (None, OTHER_GPUS))


# --- the snapshot -----------------------------------------------------------------------------


def _any_settled(now: datetime) -> bool:
    """Whether any job, of any model (retired ones too), settled in the sparse window. Asked
    only when the active models had none, so it rarely runs."""
    since = now - WINDOWS[SPARSE_WINDOW]
    return ALL_JOBS.filter(settled_at__gt=since, settled_at__lte=now).exists()


def build_snapshot(now: datetime) -> dict:
    """Every public figure at coordinator time `now`, as a JSON-ready dict."""
    catalog = list(CatalogModel.objects.filter(active=True).order_by("id")
                   .values("id", "display_name", "quant", "context_len"))
    model_ids = [m["id"] for m in catalog]
    # Hosts first, closest to `now` (the job windows query is the slow one).
    hosts = _online_hosts(now)
    adverts = _adverts(now, model_ids)
    tiers = _tiers_sql(model_ids, now)
    windows = _job_windows_sql(model_ids, now)

    models: list[dict[str, Any]] = []
    for entry in catalog:
        model_id = entry["id"]
        model_windows = windows.get(model_id) or {name: _empty_window() for name in WINDOWS}
        models.append({
            "id": model_id,
            "display_name": entry["display_name"],
            "quant": entry["quant"],
            "context_len": entry["context_len"],
            "online_hosts": len(adverts.get(model_id, ())),
            "windows": model_windows,
            "tiers": tiers[model_id],
        })
    settled_recently = sum(m["windows"][SPARSE_WINDOW]["completed"] + m["windows"][SPARSE_WINDOW]["failed"]
                           + m["windows"][SPARSE_WINDOW]["no_host"] for m in models)
    sparse = not hosts and settled_recently == 0 and not _any_settled(now)
    return {
        "generated_at": _iso(now),
        "online_hosts": len(hosts),
        "sparse": sparse,
        "models": models,
        "hardware": _hardware(hosts),
    }


def slo_payload(snapshot: dict) -> dict:
    """GET /v1/slo: per model, online hosts and the success / latency windows."""
    return {
        "generated_at": snapshot["generated_at"],
        "models": [{"id": m["id"], "online_hosts": m["online_hosts"], "windows": m["windows"]}
                   for m in snapshot["models"]],
    }


def stats_payload(snapshot: dict) -> dict:
    """GET /v1/stats: online hosts, providers per model, hardware of the online hosts."""
    return {
        "generated_at": snapshot["generated_at"],
        "online_hosts": snapshot["online_hosts"],
        "models": [{"id": m["id"], "providers": m["online_hosts"]} for m in snapshot["models"]],
        "hardware": snapshot["hardware"],
    }
