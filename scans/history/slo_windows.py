"""SLO windows in time (the Google SRE workbook's model): how long an endpoint met its team's
targets over the trailing 7 and 30 days, its error budget in time, and how fast it burns.

Time, not scan counts (DECISIONS.md, "SLO windows in time"):

- Each succeeded scan stands for the time from its start (`queued_at`) until the next finished
  scan of the endpoint, at most its endpoint's scan interval, and never past `now`. A gap longer
  than the interval is not covered: nobody looked.
- Time in the endpoint's maintenance windows (scans/maintenance.py) is cut out of every span:
  neither covered, good, bad nor no data; coverage and budget are of the time outside it.
- An errored scan is our side's failure: it stands for no time (it is uncovered, neither good
  nor bad) and ends the previous scan's time. Queued and running scans are not counted yet.
- A scan meets the SLO when it meets every target that is set: its grade is the floor or better
  (no letter is below every floor), TTFT p95 at concurrency 1 at most X ms, error rate at most
  Y; a target cannot be met on a value the scan did not measure. Its time is good or bad.
- A window of D days is [now - D days, now]; a scan that started before it counts only for its
  part inside. `covered_s` is its good plus bad time; `coverage` that over the window.
- Error budget = (1 - objective) x the window's length ("16 h 48 min of 7 d allowed");
  used = bad time. The window meets its objective while used <= budget. With little coverage
  the window says how much of it is covered, and the share (good / covered) is shown beside.
- Burn rate over the last 5 min, 30 min, 1 h, 2 h, 6 h, 24 h and 3 d = (bad / covered time
  in that span) / (1 - objective): 1 spends the budget exactly over the window. None when
  nothing in the span is covered, or the objective is 100 % (no budget to burn).
- Status (docs/slo.md, DECISIONS.md), from what was measured, never from uncovered time:
  breaching when a fast pair fires (1 h and 5 min both at 14.4x or more, or 6 h and 30 min
  at 6x) or the good share of the covered time is under the objective; at risk when a slow
  pair fires (24 h and 2 h at 3x, or 3 d and 6 h at 1x); no data when nothing is covered, or
  ("too little data yet") under MEETING_MIN_COVERED_S with nothing wrong, or a good share
  under the objective before `judged_after_s` is covered; else meeting. A pair fires only
  once half of its long span is covered (JUDGE_SHARE: a few minutes of a new endpoint are not
  a trend). The pairs are also the alerts: fast pages, slow is a ticket.

No scan count is ever divided: every share is a ratio of times. Each window carries the scoring
versions of the scans it counted (grades of different versions are not comparable).

One query per call, for any number of endpoints, and the arithmetic runs in PostgreSQL too:
the scans' pass/miss flags, each span's end (LEAD over the endpoint's scans) and the sums of
seconds (exact numerics, read back as Fractions). 50 endpoints with a week of 5-minute scans
(100,800 scans) take about 0.5 s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from functools import cached_property

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, F, FilteredRelation, Q, Window
from django.db.models.functions import Lead
from django.utils import timezone

from accounts.tenancy import scoped_to_teams
from scans import maintenance
from scans.grader import GRADES
from scans.models import Endpoint, Scan, ScanStatus

__all__ = ["BURN_PAIRS", "BURN_SPANS_S", "STATUSES", "WINDOW_DAYS", "BurnPair", "SloWindow",
           "TargetResult", "as_fraction", "free_values", "window", "windows_for"]

WINDOW_DAYS = (7, 30)
MINUTE, HOUR, DAY = 60, 3600, 86400


@dataclass(frozen=True)
class BurnPair:
    """A multi-window burn-rate alert (the SRE workbook, chapter 5): it fires while the burn
    rate over both its long and its short span is at least `threshold`."""

    level: str  # "page" (fast: breaching) or "ticket" (slow: at risk)
    long_s: int
    short_s: int
    threshold: float

    @property
    def needs_covered_s(self) -> float:
        """Covered time its long span must hold before it may fire (JUDGE_SHARE of it)."""
        return float(self.long_s * JUDGE_SHARE)

    def can_fire(self, objective: float) -> bool:
        """Its threshold is reachable at `objective`: the highest rate is 1 / (1 - objective)
        (every covered minute bad), so at 90 % a 14.4x pair never fires."""
        budget_share = 1 - as_fraction(objective)
        return budget_share > 0 and Fraction(str(self.threshold)) * budget_share <= 1


# 14.4x for 1 h spends 2 % of a 30-day budget, 6x for 6 h 5 %, 3x for 24 h and 1x for 3 d 10 %.
BURN_PAIRS = (
    BurnPair("page", HOUR, 5 * MINUTE, 14.4),
    BurnPair("page", 6 * HOUR, 30 * MINUTE, 6.0),
    BurnPair("ticket", DAY, 2 * HOUR, 3.0),
    BurnPair("ticket", 3 * DAY, 6 * HOUR, 1.0),
)
BURN_SPANS_S = tuple(sorted({s for p in BURN_PAIRS for s in (p.long_s, p.short_s)}))
# Less covered time than this, with nothing wrong in it, is too little to say "meeting".
MEETING_MIN_COVERED_S = HOUR
# A pair may fire only once at least this share of its long span is covered: more of the span
# measured than not, so a firing pair rests on at least half of the budget use it stands for
# (DECISIONS.md, "SLO status only with enough data"). The status says breaching for a good
# share under the objective only with as much covered time as the fastest pair that can fire
# at the endpoint's objective needs.
JUDGE_SHARE = Fraction(1, 2)
BREACHING, AT_RISK, MEETING, NO_DATA = "breaching", "at_risk", "meeting", "no_data"
STATUSES = (BREACHING, AT_RISK, MEETING, NO_DATA)  # in words: scans/history/slo_wording.py
TTFT_CHECK = "ttft_p95_at_concurrency_1"
ERROR_RATE_CHECK = "error_rate"
LETTERS = GRADES
TARGET_KEYS = ("grade", "ttft_p95", "error_rate")


@dataclass(frozen=True)
class TargetResult:
    key: str  # "grade", "ttft_p95" or "error_rate"
    limit: str | float  # the floor letter, the TTFT p95 in ms or the error rate it is held to
    missed_s: float  # covered time during which this target was missed
    covered_s: float

    @property
    def share(self) -> float | None:
        """Share of the covered time meeting this target."""
        return 1 - self.missed_s / self.covered_s if self.covered_s else None


@dataclass(frozen=True)
class SloWindow:
    """One window's figures; scans/history/slo_wording.py says them in words. The verdicts
    are cached on the instance: a page asks for the status of each window several times."""

    days: float  # whole days for the pages' windows; any span for an SLA report
    window_s: float
    covered_s: float  # time stood for by succeeded scans
    bad_s: float  # covered time missing at least one target
    scans: int  # succeeded scans with time in the window
    errored: int  # errored scans in the window (uncovered time)
    targets: tuple[TargetResult, ...]
    objective: float
    versions: tuple[str, ...]  # scoring versions of the counted scans, sorted
    burn_rates: tuple[tuple[int, float | None, float], ...]  # (span_s, rate, covered_s)
    maintenance_s: float = 0.0  # time in maintenance windows: neither covered, nor counted

    @property
    def enough(self) -> bool:
        """Anything to say at all: some of the window is covered."""
        return self.covered_s > 0

    @property
    def counted_s(self) -> float:
        """The window's time outside maintenance windows: what coverage and budget are of."""
        return max(self.window_s - self.maintenance_s, 0.0)

    @property
    def uncovered_s(self) -> float:
        return max(self.counted_s - self.covered_s, 0.0)

    @property
    def good_s(self) -> float:
        return self.covered_s - self.bad_s

    @property
    def budget_spent(self) -> bool:
        return Fraction(self.bad_s) > self._budget

    @property
    def has_budget(self) -> bool:
        """False with an objective of 100 %: no bad time is allowed."""
        return self._budget != 0

    @property
    def burn_rate(self) -> dict[int, float | None]:
        return {span: rate for span, rate, _ in self.burn_rates}

    def fires(self, pair: BurnPair, *, need_coverage: bool = True) -> bool:
        """Both of the pair's rates reach its threshold (and its long span is covered enough,
        unless `need_coverage` is False)."""
        rates = {span: (rate, covered) for span, rate, covered in self.burn_rates}
        long_rate, long_covered = rates.get(pair.long_s, (None, 0.0))
        short_rate, _ = rates.get(pair.short_s, (None, 0.0))
        return (long_rate is not None and short_rate is not None
                and long_rate >= pair.threshold and short_rate >= pair.threshold
                and (long_covered >= pair.needs_covered_s or not need_coverage))

    def long_covered(self, pair: BurnPair) -> float:
        return next((covered for span, _, covered in self.burn_rates if span == pair.long_s), 0.0)

    @cached_property
    def judged_after_s(self) -> float:
        """Covered time the window needs before its good share may call it breaching: what the
        fastest pair able to fire at this objective needs (the fastest pair at 100 %)."""
        able = [p for p in BURN_PAIRS if p.can_fire(self.objective)] or [BURN_PAIRS[0]]
        return min(p.needs_covered_s for p in able)

    @property
    def judged(self) -> bool:
        return self.covered_s >= self.judged_after_s

    @property
    def still_burning(self) -> bool:
        """Some pair's two rates reach its threshold, however little its long span covers:
        an alert episode already under way goes on (no recovery while a young endpoint's
        3 d span holds under 6 h)."""
        return any(self.fires(p, need_coverage=False) for p in BURN_PAIRS)

    @cached_property
    def alert_level(self) -> str:
        """"page" while a fast pair fires, "ticket" while only a slow one does, else ""."""
        firing = [p.level for p in BURN_PAIRS if self.fires(p)]
        return "page" if "page" in firing else "ticket" if firing else ""

    @cached_property
    def status(self) -> str:
        """breaching, at_risk, meeting or no_data, from the covered time only."""
        if not self.enough:
            return NO_DATA
        if self.alert_level == "page" or (self.below_objective and self.judged):
            return BREACHING
        if self.alert_level == "ticket":
            return AT_RISK
        if self.below_objective or self.covered_s < MEETING_MIN_COVERED_S:
            return NO_DATA  # too little data yet
        return MEETING

    @cached_property
    def below_objective(self) -> bool:
        """The good share of the covered time is under the objective."""
        return bool(self.covered_s) and (
            Fraction(self.bad_s) > (1 - as_fraction(self.objective)) * Fraction(self.covered_s))

    @property
    def coverage(self) -> float:
        return self.covered_s / self.counted_s if self.counted_s else 0.0

    @property
    def fully_covered(self) -> bool:
        return self.coverage >= 0.99

    @property
    def share(self) -> float | None:
        """Share of the covered time meeting every target; None when nothing is covered."""
        return 1 - self.bad_s / self.covered_s if self.covered_s else None

    @property
    def budget_s(self) -> float:
        """Time the window may miss the SLO: (1 - objective) x its length."""
        return float(self._budget)

    @property
    def budget_left_s(self) -> float:
        return float(self._budget - Fraction(self.bad_s))

    @property
    def budget_left(self) -> float | None:
        """What is left of the budget as a share of it: 1 untouched, 0 spent, below 0
        overspent; None with an objective of 100 % (no budget)."""
        if self._budget == 0:
            return None
        return float((self._budget - Fraction(self.bad_s)) / self._budget)

    @property
    def meets_objective(self) -> bool | None:
        """The good share of the covered time reaches the objective (None: nothing covered).
        Uncovered time is never counted as good."""
        if not self.enough:
            return None
        return not self.below_objective

    @property
    def mixed_versions(self) -> bool:
        return len(self.versions) > 1

    @cached_property
    def _budget(self) -> Fraction:
        # Maintenance time is not the window's to miss: the budget is of the time outside it.
        return (1 - as_fraction(self.objective)) * Fraction(self.counted_s)


def as_fraction(objective: float) -> Fraction:
    # 0.9 as a float is not 9/10; the decimal text of the stored figure is what the team meant.
    return Fraction(str(objective))


def _grade_ok() -> Q:
    """The scan's grade is its endpoint's floor or better (no letter never is)."""
    ok = Q(pk__in=[])
    for i, floor in enumerate(LETTERS):
        ok |= Q(endpoint__slo_grade_floor=floor, grade__in=LETTERS[: i + 1])
    return ok


def _value_ok(alias: str, target_field: str) -> Q:
    """The endpoint sets no target in `target_field`, or the scan measured the check joined as
    `alias` at or under it (an unmeasured value never meets a target)."""
    return (Q(**{f"endpoint__{target_field}__isnull": True})
            | Q(**{f"{alias}__value__isnull": False,
                   f"{alias}__value__lte": F(f"endpoint__{target_field}")}))


def _with_target_flags(scans, endpoints: list[Endpoint]):
    """`scans` with grade_ok, ttft_p95_ok and error_rate_ok. A check's row is joined only
    where one of the endpoints sets its target: most set none, and the join read two check
    rows for every scan of the window (with no endpoint setting it, the flag is true)."""
    joins, flags = {}, {"grade_ok": _flag(_grade_ok())}
    for flag, alias, check_id, target_field in (
            ("ttft_p95_ok", "ttft", TTFT_CHECK, "slo_ttft_p95_ms"),
            ("error_rate_ok", "errors", ERROR_RATE_CHECK, "slo_error_rate")):
        if any(getattr(e, target_field) is not None for e in endpoints):
            # LEFT JOIN on the unique (scan, check_id)
            joins[alias] = FilteredRelation(
                "check_results", condition=Q(check_results__check_id=check_id))
            flags[flag] = _flag(_value_ok(alias, target_field))
        else:
            flags[flag] = _flag(Q(**{f"endpoint__{target_field}__isnull": True}))
    return scans.annotate(**joins).annotate(**flags)


def _flag(q: Q) -> ExpressionWrapper:
    return ExpressionWrapper(q, output_field=BooleanField())


def windows_for(endpoints: Iterable[Endpoint], days: float, now: datetime | None = None,
                location: str | None = None) -> dict[int, SloWindow]:
    """The `days`-day window of each endpoint (keyed by id), in one query; only the scans
    made from `location` when given (each location's scans stand for their own time).

    The endpoints must be ones the caller was allowed to see (fetched through the scoping
    layer); their scans are read through it too.
    """
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    now = now or timezone.now()
    since = now - timedelta(days=days)
    # A scan started up to one interval before the window (or the longest burn span) still
    # stands for part of it.
    longest = max(e.interval_minutes for e in endpoints)
    earliest = min(since, now - timedelta(seconds=max(BURN_SPANS_S)))
    scans = scoped_to_teams(Scan, {e.team_id for e in endpoints}).filter(
        endpoint__in=[e.pk for e in endpoints],
        queued_at__gt=earliest - timedelta(minutes=longest), queued_at__lte=now,
        status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED],
    )
    if location:
        scans = scans.filter(location=location)
    lookback = earliest - timedelta(minutes=longest)
    held = maintenance.intervals_for(endpoints, lookback, now)
    scans = _with_target_flags(scans, endpoints)
    sums = _sums(scans, since, now, held)
    result = {}
    for endpoint in endpoints:
        r = sums.get(endpoint.pk) or {}
        keys = ["grade"]
        limits: dict[str, str | float] = {"grade": endpoint.slo_grade_floor}
        if endpoint.slo_ttft_p95_ms is not None:
            keys.append("ttft_p95")
            limits["ttft_p95"] = endpoint.slo_ttft_p95_ms
        if endpoint.slo_error_rate is not None:
            keys.append("error_rate")
            limits["error_rate"] = endpoint.slo_error_rate
        covered = r.get("covered", Fraction(0))
        budget_share = 1 - as_fraction(endpoint.slo_objective)
        burn = []
        for span in BURN_SPANS_S:
            span_covered = r.get(f"covered_{span}s", Fraction(0))
            span_bad = r.get(f"bad_{span}s", Fraction(0))
            rate = (float(span_bad / span_covered / budget_share)
                    if span_covered and budget_share else None)
            burn.append((span, rate, float(span_covered)))
        result[endpoint.pk] = SloWindow(
            days=days, window_s=float(days * 86400), covered_s=float(covered),
            bad_s=float(r.get("bad", 0)), scans=r.get("scans", 0), errored=r.get("errored", 0),
            targets=tuple(TargetResult(key, limits[key], float(r.get(f"{key}_missed", 0)),
                                       float(covered)) for key in keys),
            objective=endpoint.slo_objective,
            versions=tuple(sorted(v for v in r.get("versions") or () if v)),
            burn_rates=tuple(burn),
            maintenance_s=sum((min(e, now) - max(b, since)).total_seconds()
                              for b, e in held[endpoint.pk] if e > since),
        )
    return result


def spans_cte(scans, now: datetime, columns: tuple[str, ...] = ()) -> tuple[str, list]:
    """SQL for the common table `spanned AS (...)`, one row per scan of `scans` (a scoped
    queryset of finished scans) with endpoint_id, queued_at, status, `columns` and `stop`: the
    end of the time the scan stands for, at the next finished scan of its endpoint (LEAD), at
    its endpoint's interval, or at `now`, whichever comes first. Its parameters are returned
    beside it. The scoped queryset's SQL is wrapped, never rebuilt, so its filters stay."""
    inner = scans.annotate(
        next_at=Window(Lead("queued_at"), partition_by=[F("endpoint_id")],
                       order_by=[F("queued_at").asc(), F("pk").asc()]),
        interval_minutes=F("endpoint__interval_minutes"),
    ).order_by().values("endpoint_id", "queued_at", "status", *columns, "next_at",
                        "interval_minutes")
    inner_sql, inner_params = inner.query.sql_with_params()
    sql = f"""spanned AS (
            SELECT finished.*,
                   LEAST(queued_at + make_interval(mins => interval_minutes),
                         COALESCE(next_at, 'infinity'::timestamptz), %s) AS stop
            FROM ({inner_sql}) AS finished
        )"""  # noqa: S608
    return sql, [now, *inner_params]


def free_values(held: dict[int, list[tuple[datetime, datetime]]]) -> tuple[str, list]:
    """VALUES rows (endpoint_id, free_start, free_end): each endpoint's time outside its
    maintenance windows, from -infinity to infinity (one row when it has none)."""
    rows, params = [], []
    for pk, spans in held.items():
        edges: list = ["-infinity"]
        for begins, ends in spans:
            edges += [begins, ends]
        edges.append("infinity")
        for i in range(0, len(edges), 2):
            rows.append("(%s::bigint, %s::timestamptz, %s::timestamptz)")
            params += [pk, edges[i], edges[i + 1]]
    return ", ".join(rows), params


def _sums(scans, since: datetime, now: datetime,
          held: dict[int, list[tuple[datetime, datetime]]]) -> dict[int, dict]:
    """Per endpoint: the seconds (exact, as Fractions) covered, bad and missed per target in
    [since, now], the same over the burn spans, counts and versions, summed in PostgreSQL.

    `scans` is the scoped queryset of the endpoints' finished scans with their *_ok flags;
    its SQL is wrapped, never rebuilt, so the scoping layer's filters stay in force. Each
    succeeded scan's span ends at the next finished scan (LEAD), at its endpoint's interval,
    or at now, whichever comes first. Its time inside the endpoint's maintenance windows
    (`held`) is cut out: a span is summed as its pieces outside them (free).
    """
    spanned_sql, spanned_params = spans_cte(
        scans, now, ("id", "scoring_version", "grade_ok", "ttft_p95_ok", "error_rate_ok"))
    free_rows, free_params = free_values(held)

    def seconds_from(start_param: str) -> str:
        return (f"GREATEST(EXTRACT(EPOCH FROM (stop - GREATEST(queued_at, {start_param}))), 0)")

    succeeded = "status = 'succeeded'"
    # `stop > start` first: most rows end before a burn span and are skipped without arithmetic.
    burn_columns = "".join(
        f", SUM({seconds_from('%s')}) FILTER (WHERE stop > %s AND {succeeded}) AS covered_{span}s"
        f", SUM({seconds_from('%s')}) FILTER (WHERE stop > %s AND {succeeded} AND missed)"
        f" AS bad_{span}s"
        for span in BURN_SPANS_S)
    # Only constants and the ORM's own SQL are formatted in; every value is a parameter.
    sql = f"""
        WITH {spanned_sql},
        free (endpoint_id, free_start, free_end) AS (VALUES {free_rows}),
        spans AS (
            -- a succeeded scan's span as its pieces outside maintenance; an errored scan once
            SELECT s.endpoint_id, s.id, s.status, s.scoring_version,
                   GREATEST(s.queued_at, f.free_start) AS queued_at,
                   LEAST(s.stop, f.free_end) AS stop,
                   NOT grade_ok AS grade_missed, NOT ttft_p95_ok AS ttft_p95_missed,
                   NOT error_rate_ok AS error_rate_missed,
                   NOT (grade_ok AND ttft_p95_ok AND error_rate_ok) AS missed
            FROM spanned s JOIN free f ON f.endpoint_id = s.endpoint_id
                AND CASE WHEN s.status = 'succeeded'
                         THEN f.free_start < s.stop AND f.free_end > s.queued_at
                         ELSE f.free_start = '-infinity' END
        )
        SELECT endpoint_id,
               COUNT(*) FILTER (WHERE status = 'errored' AND queued_at > %s) AS errored,
               COUNT(DISTINCT id) FILTER (WHERE status = 'succeeded' AND stop > %s) AS scans,
               ARRAY_AGG(DISTINCT scoring_version)
                   FILTER (WHERE status = 'succeeded' AND stop > %s) AS versions,
               SUM({seconds_from('%s')}) FILTER (WHERE status = 'succeeded') AS covered,
               SUM({seconds_from('%s')}) FILTER (WHERE status = 'succeeded' AND missed) AS bad,
               SUM({seconds_from('%s')})
                   FILTER (WHERE status = 'succeeded' AND grade_missed) AS grade_missed,
               SUM({seconds_from('%s')})
                   FILTER (WHERE status = 'succeeded' AND ttft_p95_missed) AS ttft_p95_missed,
               SUM({seconds_from('%s')})
                   FILTER (WHERE status = 'succeeded' AND error_rate_missed) AS error_rate_missed
               {burn_columns}
        FROM spans GROUP BY endpoint_id
    """  # noqa: S608
    burn_params = []
    for span in BURN_SPANS_S:
        start = now - timedelta(seconds=span)
        burn_params += [start, start, start, start]
    params = [*spanned_params, *free_params, since, since, since, since, since, since, since, since,
              *burn_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c.name for c in cursor.description]
        rows = cursor.fetchall()
    result = {}
    for row in rows:
        r = dict(zip(names, row, strict=True))
        result[r["endpoint_id"]] = {
            key: (Fraction(value) if isinstance(value, Decimal) else
                  Fraction(0) if value is None and key not in ("versions",) else value)
            for key, value in r.items()}
    return result


def window(endpoint: Endpoint, days: int, now: datetime | None = None,
           location: str | None = None) -> SloWindow:
    """One endpoint's `days`-day window (from one scan location when given)."""
    return windows_for([endpoint], days, now, location)[endpoint.pk]
