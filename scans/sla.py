"""SLA reports: for a month (or any range of whole UTC days), per endpoint and per team, what was
promised and what was delivered, from the read models the pages already use:

- availability of the covered time and the down time (scans.status_pages.availability: the
  scans' spans, or the liveness probes where they covered more of a day);
- time uncovered and maintenance left out (maintenance windows are neither good nor bad);
- SLO attainment against the objective and the error budget spent
  (scans.history.slo_windows over the range);
- the grade distribution of the graded scans, down scans apart (down is a state, not a
  grade);
- incidents, each run of down scans with its duration (scans.status_pages.incidents).

One report is read with one query per read model, whatever the number of endpoints. It is
rendered as a page (scans/pages/sla.py), CSV, PDF and JSON (scans/api/sla.py)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from accounts.tenancy import scoped_to_teams
from scans.grader import GRADES, format_percent
from scans.history import slo_windows
from scans.history.slo_wording import duration_text
from scans.models import Endpoint, Scan, ScanStatus
from scans.status_pages import availability, incidents

__all__ = ["EndpointSla", "MalformedRange", "RangeError", "SlaReport", "month_range",
           "mail_due_reports", "parse_range", "report_csv", "report_pdf", "sla_report"]

#: The longest range one report covers: a year and a day (a leap year's whole).
MAX_DAYS = 367


class RangeError(ValueError):
    """A month or range that cannot be reported, in words for the person who asked."""


class MalformedRange(RangeError):
    """A month or day that is not one (the others are well formed but not reportable)."""


def month_range(month: str) -> tuple[date, date]:
    """"2026-11" → (2026-11-01, 2026-12-01): the month's first day and the next month's."""
    try:
        first = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise MalformedRange(f"month {month!r}: expected YYYY-MM, e.g. 2026-11") from None
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first, following


def parse_range(month: str | None, since: str | None, until: str | None,
                today: date) -> tuple[date, date]:
    """The report's days [start, end) from a month, or from since and until (dates, until
    inclusive); the last whole month when nothing is given."""
    if month and (since or until):
        raise RangeError("give a month or since and until, not both")
    if month:
        start, end = month_range(month)
    elif since or until:
        try:
            first = date.fromisoformat(since) if since else None
            last = date.fromisoformat(until) if until else None
        except ValueError:
            raise MalformedRange("since and until: expected dates such as 2026-11-01 "
                                 "and 2026-11-30") from None
        if first is None or last is None:
            raise RangeError("give both since and until (or a month)")
        start, end = first, last + timedelta(days=1)
    else:
        start, end = month_range((today.replace(day=1) - timedelta(days=1)).strftime("%Y-%m"))
    if end <= start:
        raise RangeError("the range ends before it starts")
    if (end - start).days > MAX_DAYS:
        raise RangeError(f"a report covers at most {MAX_DAYS} days")
    if start > today:
        raise RangeError("the range starts in the future")
    return start, end


@dataclass(frozen=True)
class EndpointSla:
    endpoint: Endpoint
    range_s: float  # the range's time, up to now
    maintenance_s: float  # in maintenance windows: left out of everything below
    covered_s: float  # time scans (or probes) stood for
    down_s: float  # of which the endpoint was down
    objective: float
    slo_bad_s: float  # covered time that missed a target of the SLO
    slo_covered_s: float  # the time the SLO judged (scans only)
    grades: dict[str, int]  # letter → graded scans
    down_scans: int
    incidents: tuple[incidents.Incident, ...]
    until: datetime  # the report's end: an incident still going is counted up to it

    @property
    def uncovered_s(self) -> float:
        return max(self.range_s - self.maintenance_s - self.covered_s, 0.0)

    @property
    def availability(self) -> float | None:
        """The share of the covered time the endpoint was up; None with nothing covered."""
        return (self.covered_s - self.down_s) / self.covered_s if self.covered_s else None

    @property
    def attainment(self) -> float | None:
        """The share of the SLO's covered time that met every target."""
        return 1 - self.slo_bad_s / self.slo_covered_s if self.slo_covered_s else None

    @property
    def met(self) -> bool | None:
        return None if self.attainment is None else self.attainment >= self.objective

    @property
    def budget_s(self) -> float:
        """The error budget of the range: (1 − objective) × its time outside maintenance."""
        return (1 - self.objective) * max(self.range_s - self.maintenance_s, 0.0)

    @property
    def budget_spent(self) -> float | None:
        """Bad time over the budget (1.0: all of it spent); None without a budget."""
        return self.slo_bad_s / self.budget_s if self.budget_s else None

    @property
    def incident_s(self) -> float:
        return sum(i.duration_s(self.until) for i in self.incidents)


@dataclass(frozen=True)
class SlaReport:
    start: date
    end: date  # exclusive
    until: datetime  # where the figures stop: the range's end, or now for a range not over
    endpoints: tuple[EndpointSla, ...] = field(default=())

    @property
    def title(self) -> str:
        last = self.end - timedelta(days=1)
        if self.start.day == 1 and self.end.day == 1 and (
                (self.end - self.start).days in range(28, 32)):
            return self.start.strftime("%B %Y")
        return f"{self.start:%Y-%m-%d} to {last:%Y-%m-%d}"

    @property
    def partial(self) -> bool:
        return self.until < datetime.combine(self.end, datetime.min.time(), UTC)

    @property
    def team(self) -> EndpointSla | None:
        """The team's totals: every endpoint's times added up (its availability is of all
        their covered time), the grade counts and incidents together; None without endpoints."""
        if not self.endpoints:
            return None
        grades = {g: sum(e.grades.get(g, 0) for e in self.endpoints) for g in GRADES}
        first = self.endpoints[0]
        objective = min(e.objective for e in self.endpoints)
        return EndpointSla(
            endpoint=first.endpoint, range_s=sum(e.range_s for e in self.endpoints),
            maintenance_s=sum(e.maintenance_s for e in self.endpoints),
            covered_s=sum(e.covered_s for e in self.endpoints),
            down_s=sum(e.down_s for e in self.endpoints), objective=objective,
            slo_bad_s=sum(e.slo_bad_s for e in self.endpoints),
            slo_covered_s=sum(e.slo_covered_s for e in self.endpoints), grades=grades,
            down_scans=sum(e.down_scans for e in self.endpoints),
            incidents=tuple(i for e in self.endpoints for i in e.incidents), until=self.until)


def sla_report(endpoints: Iterable[Endpoint], start: date, end: date,
               now: datetime | None = None) -> SlaReport:
    """The report of `endpoints` (ones the caller may see) over the UTC days [start, end), up
    to now for a range that is not over."""
    endpoints = list(endpoints)
    now = now or timezone.now()
    begin = datetime.combine(start, datetime.min.time(), UTC)
    until = min(datetime.combine(end, datetime.min.time(), UTC), now)
    if not endpoints or until <= begin:
        return SlaReport(start, end, until)
    # The day cells end at the last instant before `until` (a cell per UTC day up to it).
    last_instant = until - timedelta(microseconds=1)
    days = (last_instant.date() - start).days + 1
    cells = availability.daily_availability(endpoints, days, last_instant)
    windows = slo_windows.windows_for(endpoints, (until - begin) / timedelta(days=1), until)
    runs = incidents.incidents(endpoints, begin, until)
    counted = (scoped_to_teams(Scan, {e.team_id for e in endpoints})
               .filter(endpoint__in=[e.pk for e in endpoints], status=ScanStatus.SUCCEEDED,
                       queued_at__gte=begin, queued_at__lt=until)
               .values("endpoint_id", "grade", "down").annotate(n=Count("pk")))
    grades: dict[int, dict[str, int]] = {e.pk: {} for e in endpoints}
    down_scans: dict[int, int] = {e.pk: 0 for e in endpoints}
    for row in counted:
        if row["down"]:
            down_scans[row["endpoint_id"]] += row["n"]
        elif row["grade"] in GRADES:
            grades[row["endpoint_id"]][row["grade"]] = row["n"]
    report = []
    for endpoint in endpoints:
        days_of = cells[endpoint.pk]
        window = windows[endpoint.pk]
        report.append(EndpointSla(
            endpoint=endpoint, range_s=(until - begin).total_seconds(),
            maintenance_s=sum(c.maintenance_s for c in days_of),
            covered_s=sum(c.covered_s for c in days_of),
            down_s=sum(c.down_s for c in days_of), objective=endpoint.slo_objective,
            slo_bad_s=window.bad_s, slo_covered_s=window.covered_s,
            grades=grades[endpoint.pk], down_scans=down_scans[endpoint.pk],
            incidents=tuple(sorted(runs[endpoint.pk], key=lambda i: i.started_at)),
            until=until))
    return SlaReport(start, end, until, tuple(report))


# -- files ---------------------------------------------------------------------------------------

CSV_COLUMNS = ("endpoint", "endpoint_id", "from", "to", "availability", "down_s", "covered_s",
               "uncovered_s", "maintenance_s", "slo_objective", "slo_attainment", "slo_met",
               "error_budget_s", "error_budget_spent", *(f"grade_{g}" for g in GRADES),
               "down_scans", "incidents", "incident_s")


def _row(name: str, endpoint_id: str, line: EndpointSla, report: SlaReport) -> list:
    def number(value: float | None, digits: int = 6) -> str:
        if value is None:
            return ""
        text = f"{value:.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text

    return [name, endpoint_id, report.start.isoformat(), report.until.isoformat(),
            number(line.availability), number(line.down_s, 0), number(line.covered_s, 0),
            number(line.uncovered_s, 0), number(line.maintenance_s, 0), number(line.objective),
            number(line.attainment), "" if line.met is None else str(line.met).lower(),
            number(line.budget_s, 0), number(line.budget_spent),
            *(line.grades.get(g, 0) for g in GRADES), line.down_scans, len(line.incidents),
            number(line.incident_s, 0)]


def report_csv(report: SlaReport, team_name: str) -> str:
    """One row per endpoint and a last row of the team's totals; times in seconds, shares
    as fractions (0.9995), so a spreadsheet computes with them as they are."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for line in report.endpoints:
        writer.writerow(_row(line.endpoint.name, str(line.endpoint.public_id), line, report))
    if (total := report.team) is not None:
        writer.writerow(_row(f"{team_name} (team)", "", total, report))
    return out.getvalue()


def share_text(value: float | None) -> str:
    return "no data" if value is None else format_percent(value, [1.0])


def report_pdf(report: SlaReport, team_name: str) -> bytes:
    """The report as a PDF (reportlab, no network: its built-in fonts only)."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    document = SimpleDocTemplate(out, pagesize=landscape(A4), title=f"SLA report: {team_name}",
                                 author="Tokvera")
    story = [Paragraph(f"SLA report: {_escape(team_name)}, {report.title}", styles["Title"]),
             Paragraph(f"UTC, from {report.start:%Y-%m-%d} to {report.until:%Y-%m-%d %H:%M}"
                       f"{' (the range is not over)' if report.partial else ''}. Maintenance "
                       "windows are left out of every figure.", styles["Normal"]),
             Spacer(1, 12)]
    header = ["Endpoint", "Availability", "Down", "No data", "Maintenance", "SLO met",
              "Budget spent", "Grades", "Incidents"]
    rows = [header]
    lines = [(line.endpoint.name, line) for line in report.endpoints]
    if (total := report.team) is not None:
        lines.append((f"{team_name} (team)", total))
    for name, line in lines:
        rows.append([
            Paragraph(_escape(name), styles["Normal"]), share_text(line.availability),
            duration_text(line.down_s) if line.down_s else "—", duration_text(line.uncovered_s),
            duration_text(line.maintenance_s) if line.maintenance_s else "—",
            f"{share_text(line.attainment)} of {share_text(line.objective)}",
            share_text(line.budget_spent), grades_text(line),
            f"{len(line.incidents)} ({duration_text(line.incident_s)})" if line.incidents else "0"])
    table = Table(rows, repeatRows=1)
    table.setStyle(TableStyle([
        ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
        ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.grey),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("FONTSIZE", (0, 0), (-1, -1), 9),
    ]))
    story.append(table)
    incident_rows = [["Endpoint", "Down from", "Until", "Lasted"]]
    for line in report.endpoints:
        for run in line.incidents:
            incident_rows.append([
                Paragraph(_escape(line.endpoint.name), styles["Normal"]),
                f"{run.started_at:%Y-%m-%d %H:%M}",
                f"{run.ended_at:%Y-%m-%d %H:%M}" if run.ended_at else "still down",
                duration_text(run.duration_s(report.until))])
    if len(incident_rows) > 1:
        story += [Spacer(1, 16), Paragraph("Incidents", styles["Heading2"]),
                  Table(incident_rows, repeatRows=1)]
    document.build(story)
    return out.getvalue()


def grades_text(line: EndpointSla) -> str:
    """"A ×700, B ×20, down ×3": the graded scans by letter, then the down ones."""
    parts = [f"{g} ×{line.grades[g]}" for g in GRADES if line.grades.get(g)]
    if line.down_scans:
        parts.append(f"down ×{line.down_scans}")
    return ", ".join(parts) or "no scan"


def _escape(text: str) -> str:
    """Text for a reportlab Paragraph, which reads a little markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the monthly mail ----------------------------------------------------------------------------


def last_whole_month(today: date) -> tuple[date, date]:
    """The month before `today`'s: (its first day, `today`'s month's first day)."""
    end = today.replace(day=1)
    return (end - timedelta(days=1)).replace(day=1), end


def mail_due_reports(now: datetime | None = None) -> int:
    """Mail the last whole month's report to the owners of each team that asked for it
    (Team.sla_report_mail) and has not had it yet; returns how many teams were mailed.

    Each team is claimed with a conditional UPDATE of `sla_report_mailed_for` before its mail
    goes, so two passes (a retry, two beat processes) mail a month once. A mail that fails to
    send gives the claim back, so the next pass tries again."""
    from django.conf import settings
    from django.core.mail import EmailMessage
    from django.db.models import Q
    from django.urls import reverse

    from accounts.models import Membership, Role, Team

    now = now or timezone.now()
    start, end = last_whole_month(now.date())
    due = (Team.dangerously_unscoped  # a pass over every team, like the retention pass
           .filter(sla_report_mail=True)
           .filter(Q(sla_report_mailed_for__isnull=True) | Q(sla_report_mailed_for__lt=start))
           .values_list("pk", "sla_report_mailed_for"))
    mailed = 0
    for team_id, before in due:
        claimed = Team.dangerously_unscoped.filter(
            pk=team_id, sla_report_mailed_for=before).update(sla_report_mailed_for=start)
        if not claimed:
            continue  # another pass took it
        team = Team.dangerously_unscoped.get(pk=team_id)
        owners = list(Membership.objects.for_team(team_id).filter(role=Role.OWNER)
                      .exclude(user__email="").values_list("user__email", flat=True))
        if not owners:
            continue
        endpoints = Endpoint.objects.for_team(team_id).order_by("name", "pk")
        report = sla_report(endpoints, start, end, now)
        link = f"{settings.SITE_URL}{reverse('team-sla', args=[team.slug])}?month={start:%Y-%m}"
        lines = [f"The SLA report of {team.name} for {report.title} (UTC), as PDF and CSV.",
                 "", *(f"- {line.endpoint.name}: {share_text(line.availability)} available, "
                       f"SLO {share_text(line.attainment)} of {share_text(line.objective)}, "
                       f"{len(line.incidents)} incident(s)" for line in report.endpoints),
                 "", f"On the site: {link}",
                 "You get this mail because the team's settings ask for it; any owner can "
                 "turn it off there."]
        name = f"sla-{team.slug}-{start:%Y-%m}"
        message = EmailMessage(subject=f"SLA report: {team.name}, {report.title}",
                               body="\n".join(lines), to=owners)
        message.attach(f"{name}.pdf", report_pdf(report, team.name), "application/pdf")
        message.attach(f"{name}.csv", report_csv(report, team.name), "text/csv")
        try:
            message.send()
        except OSError:
            Team.dangerously_unscoped.filter(pk=team_id, sla_report_mailed_for=start).update(
                sla_report_mailed_for=before)
            raise
        mailed += 1
    return mailed
