"""The SLO windows in words: what the endpoint page, the dashboard, the API and the alerts say
of the figures scans/history/slo_windows.py computes (docs/slo.md quotes these sentences).

The page, the API and an alert show the same windows, so their words live here once, below
all three: a module beside the pages could not serve the alerts (the pages import them).
`WindowWords(window)` says one window; the functions say a span of time, a burn pair or a
target.
"""

from __future__ import annotations

from dataclasses import dataclass

from scans.history.slo_windows import (
    AT_RISK,
    BREACHING,
    BURN_PAIRS,
    DAY,
    HOUR,
    MEETING,
    MEETING_MIN_COVERED_S,
    MINUTE,
    NO_DATA,
    BurnPair,
    SloWindow,
    TargetResult,
    as_fraction,
)

__all__ = ["LEVEL_WORDS", "STATUS_LABELS", "TOO_LITTLE_LABEL", "WindowWords", "duration_text",
           "missed_text", "pair_label", "pair_meaning", "rate_text", "span_text", "target_label"]

LEVEL_WORDS = {"page": "someone should look now", "ticket": "look within the working day"}
STATUS_LABELS = {BREACHING: "breaching", AT_RISK: "at risk", MEETING: "meeting",
                 NO_DATA: "no data"}
TOO_LITTLE_LABEL = "too little data yet"  # no_data with something covered, not enough to judge


def duration_text(seconds: float | None) -> str:
    """43 min, 16 h 48 min, 2 d 4 h: what a person reads for a span of time."""
    if seconds is None:
        return "—"
    minutes = int(round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min" if minutes or seconds <= 0 else "under 1 min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def span_text(seconds: float) -> str:
    """A burn span as the workbook names it: 5 min, 30 min, 1 h, 24 h, 3 d."""
    if seconds < HOUR:
        return f"{seconds / MINUTE:g} min"
    if seconds <= DAY:
        return f"{seconds / HOUR:g} h"
    return f"{seconds / DAY:g} d"


def rate_text(rate: float | None) -> str:
    return "no data" if rate is None else f"{rate:.1f}×"


def pair_label(pair: BurnPair) -> str:
    """'6 h and 30 min': the pair's two spans."""
    return f"{span_text(pair.long_s)} and {span_text(pair.short_s)}"


def pair_meaning(pair: BurnPair) -> str:
    """The pair in plain words, beside its SRE terms."""
    return (f"{pair.level} ({LEVEL_WORDS[pair.level]}) when the last {span_text(pair.long_s)} "
            f"and the last {span_text(pair.short_s)} both spend the budget at least "
            f"{pair.threshold:g} times as fast as the objective allows")


def target_label(target: TargetResult) -> str:
    """'grade B or better', 'TTFT p95 at concurrency 1 at most 800 ms', 'error rate at most 1.00%'."""
    if target.key == "ttft_p95":
        return f"TTFT p95 at concurrency 1 at most {target.limit:g} ms"
    if target.key == "error_rate":
        return f"error rate at most {target.limit:.2%}"
    return f"grade {target.limit} or better"


def missed_text(target: TargetResult) -> str:
    return duration_text(target.missed_s)


def _burn_sentence(pair: BurnPair, rates: dict[int, float | None]) -> str:
    return (f"the last {span_text(pair.long_s)} burned the error budget at "
            f"{rate_text(rates.get(pair.long_s))} and the last {span_text(pair.short_s)} at "
            f"{rate_text(rates.get(pair.short_s))} ({pair.level} at {pair.threshold:g}× or more)")


@dataclass(frozen=True)
class WindowWords:
    """One SLO window in words; `window` holds its figures."""

    window: SloWindow

    @property
    def empty_message(self) -> str:
        w = self.window
        return "" if w.enough else f"no scan covers the last {w.days} days"

    @property
    def maintenance_text(self) -> str:
        """'maintenance for 2 h of the 7 days': left out, neither good, bad nor no data."""
        w = self.window
        if w.maintenance_s < 60:
            return ""
        return f"maintenance for {duration_text(w.maintenance_s)} of the {w.days} days"

    @property
    def uncovered_text(self) -> str:
        """'no data for 29 d 23 h of the 30 days': never counted as good (nor as bad)."""
        w = self.window
        if w.uncovered_s < 60:
            return ""
        return f"no data for {duration_text(w.uncovered_s)} of the {w.days} days"

    @property
    def allowance_text(self) -> str:
        """The objective's help in time: '99% over 30 days allows 7 h 12 min of bad time'."""
        w = self.window
        objective = f"{float(as_fraction(w.objective) * 100):g}%"
        if not w.has_budget:
            return f"{objective} over {w.days} days allows no bad time"
        return (f"{objective} over {w.days} days allows "
                f"{duration_text(w.budget_s)} of bad time")

    @property
    def budget_used_text(self) -> str:
        """'1 h used, 15 h 48 min left' or '20 h used: spent, 3 h 12 min over'."""
        w = self.window
        used = f"{duration_text(w.bad_s)} used"
        if w.budget_spent:
            return f"{used}: spent, {duration_text(-w.budget_left_s)} over"
        return f"{used}, {duration_text(w.budget_left_s)} left"

    @property
    def covered_text(self) -> str:
        """'0 min good and 37 min bad of 37 min covered'."""
        w = self.window
        return (f"{duration_text(w.good_s)} good and {duration_text(w.bad_s)} bad of "
                f"{duration_text(w.covered_s)} covered")

    @property
    def coverage_text(self) -> str:
        """'scans cover 2 h 10 min of 7 d (1.3 %)'."""
        w = self.window
        of = (f"{w.days} d" if w.maintenance_s < 60 else
              f"the {duration_text(w.counted_s)} outside maintenance")
        return f"scans cover {duration_text(w.covered_s)} of {of} ({w.coverage:.1%})"

    @property
    def budget_text(self) -> str:
        """'16 h 48 min of 7 d allowed, 12 min used'."""
        w = self.window
        return (f"{duration_text(w.budget_s)} of {w.days} d allowed, "
                f"{duration_text(w.bad_s)} used")

    @property
    def targets(self) -> list[dict]:
        """Each target with its label, the share of the covered time meeting it and the time
        it was missed."""
        return [{"key": t.key, "label": target_label(t), "share": t.share,
                 "missed_text": missed_text(t)} for t in self.window.targets]

    @property
    def burn(self) -> list[dict]:
        """The burn rates as the page shows them: span, rate (None: nothing covered)."""
        return [{"span_s": span, "span": span_text(span), "rate": rate,
                 "rate_text": rate_text(rate), "covered": duration_text(covered),
                 "covered_s": covered}
                for span, rate, covered in self.window.burn_rates]

    @property
    def alert_windows(self) -> list[dict]:
        """Each burn-rate pair with its two rates and whether it fires now."""
        w = self.window
        return [{"level": p.level, "label": pair_label(p), "long_s": p.long_s,
                 "short_s": p.short_s, "threshold": p.threshold,
                 "long_rate": w.burn_rate.get(p.long_s),
                 "short_rate": w.burn_rate.get(p.short_s),
                 "rates_text": (f"{rate_text(w.burn_rate.get(p.long_s))} · "
                                f"{rate_text(w.burn_rate.get(p.short_s))}"),
                 "firing": w.fires(p),
                 # both rates reach it, but its long span is not covered enough yet
                 "waiting": w.fires(p, need_coverage=False) and not w.fires(p),
                 "waiting_text": (f"not yet: {duration_text(w.long_covered(p))} of the "
                                  f"{duration_text(p.needs_covered_s)} of the last "
                                  f"{span_text(p.long_s)} it needs covered"),
                 "meaning": pair_meaning(p),
                 "short_text": span_text(p.short_s)} for p in BURN_PAIRS]

    @property
    def status_label(self) -> str:
        w = self.window
        if w.status == NO_DATA and w.enough:
            return TOO_LITTLE_LABEL
        return STATUS_LABELS[w.status]

    @property
    def status_meaning(self) -> str:
        """The status in plain words, beside its SRE term."""
        w = self.window
        status = w.status
        firing = [p for p in BURN_PAIRS if w.fires(p)
                  and (status == AT_RISK or p.level == "page")]
        if status in (BREACHING, AT_RISK) and firing:
            pair = firing[0]
            rate = w.burn_rate.get(pair.long_s) or pair.threshold
            return (f"the error budget is being spent {rate:.3g} times as fast as the objective "
                    f"allows: at this pace the {w.days} days' budget is gone in "
                    f"{duration_text(w.window_s / rate)}; {LEVEL_WORDS[pair.level]}")
        if status == BREACHING:
            return ("less of the measured time met every target than the objective asks: the "
                    "window misses its objective unless the rest of it goes better")
        if status == MEETING:
            return ("the measured time meets the objective and the error budget is not being "
                    "spent faster than it may")
        if w.enough:
            return ("too little of the window is measured to call it either way; the status "
                    "waits rather than guess")
        return "nothing in the window is measured yet"

    @property
    def status_reason(self) -> str:
        """One sentence: why the status is what it is."""
        w = self.window
        status = w.status
        if status == NO_DATA:
            if not w.enough:
                return self.empty_message
            needed = w.judged_after_s if w.below_objective else MEETING_MIN_COVERED_S
            so_far = (", nothing wrong in it" if not w.bad_s else
                      f", {w.share:.1%} of it good so far")
            return (f"{TOO_LITTLE_LABEL}: {duration_text(w.covered_s)} of "
                    f"{duration_text(needed)} covered{so_far}")
        firing = [p for p in BURN_PAIRS if w.fires(p)]
        pages = [p for p in firing if p.level == "page"]
        if status == BREACHING:
            if pages:
                return _burn_sentence(pages[0], w.burn_rate)
            return (f"{w.share:.1%} of the covered time was good, under the "
                    f"{w.objective:.1%} objective")
        if status == AT_RISK:
            return _burn_sentence(firing[0], w.burn_rate)
        return (f"{w.share:.1%} of the covered time was good (objective "
                f"{w.objective:.1%}); no burn-rate alert fires")
