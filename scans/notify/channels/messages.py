"""What an alert says, the same on every channel: the news, the state and its cause, how long
it lasted (on a recovery: "down for 37 min"), and the scan's link."""

from __future__ import annotations

from scans.history import state
from scans.history.slo_wording import duration_text
from scans.notify.channels.kinds import Message

# A recovery and the events that opened its episode; the words for how long it lasted.
OPENED_BY = {
    "down_recovered": (("down",), "down for"),
    "floor_recovered": (("below_floor",), "below the grade floor for"),
    "erroring_recovered": (("erroring",), "erroring for"),
    "slo_recovered": (("slo_breaching", "slo_at_risk"), "burning its error budget for"),
    "capacity_recovered": (("capacity_low",), "below the capacity alert for"),
    "unreachable_from_recovered": (("unreachable_from",), "unreachable from a location for"),
}
# The kind of trouble each opening and recovery is about: their incident shares one key.
TROUBLE = {
    kind: recovery.removesuffix("_recovered")
    for recovery, (openings, _) in OPENED_BY.items()
    for kind in (recovery, *openings)
}
TROUBLE["still_down"] = "down"  # a reminder belongs to the down incident it reminds of
FAILURES = {"down", "still_down", "erroring", "slo_breaching"}
WARNINGS = {"below_floor", "slo_at_risk", "capacity_low", "unreachable_from"}


def level(kind: str) -> str:
    if kind in FAILURES:
        return "failure"
    if kind in WARNINGS:
        return "warning"
    return "success" if kind.endswith("_recovered") else "info"


def lasted_text(kind: str, lasted_s: float | None) -> str:
    """'Down for 37 min.' for a recovery whose start is known; '' otherwise."""
    if lasted_s is None or kind not in OPENED_BY:
        return ""
    words = OPENED_BY[kind][1]
    return f"{words[0].upper()}{words[1:]} {duration_text(lasted_s)}."


def incident_key(payload: dict) -> str:
    """'tokvera-<endpoint id>-down' for a down alert and its recovery; '' for other news."""
    trouble = TROUBLE.get(payload["event"])
    endpoint = payload.get("endpoint") or {}
    return f"tokvera-{endpoint['id']}-{trouble}" if trouble and endpoint.get("id") else ""


def render(payload: dict) -> Message:
    """The title and text every channel sends for one alert payload (scans.notify.alerts.payload)."""
    kind = payload["event"]
    if kind == "test" and "endpoint" not in payload:  # queued before tests looked like alerts
        return Message(
            title=f"[Tokvera] test message to {payload['channel']}",
            body=payload["detail"],
            level="info",
            payload=payload,
        )
    endpoint = payload["endpoint"]["name"]
    lines = [
        f"{endpoint} ({payload['team']}): {payload['detail']}"
        if payload.get("team")
        else f"{endpoint}: {payload['detail']}",
        "",
        f"State: {state.LABELS.get(payload['state'], payload['state'])}",
    ]
    if payload.get("cause"):
        lines.append(f"Cause: {payload['cause']}")
    if payload.get("lasted"):
        lines.append(payload["lasted"])
    # A probe's news has no scan: its link is the endpoint's page.
    link = "The scan" if payload.get("scan") else "The endpoint"
    lines += ["", f"{link}: {payload['url']}"]
    if "slo" in payload:
        lines.append(f"The SLO: {payload['slo']['url']}")
    if kind == "test":  # a test never opens or resolves an incident on a paging service
        lines[-1] = f"The endpoint: {payload['url']}"
        return Message(
            title=f"[Tokvera] test message to {payload['channel']}",
            body="\n".join(lines) + "\n",
            level="info",
            payload=payload,
        )
    return Message(
        title=f"[Tokvera] {endpoint}: {kind.replace('_', ' ')}",
        body="\n".join(lines) + "\n",
        level=level(kind),
        payload=payload,
        incident=incident_key(payload),
        resolves=kind in OPENED_BY,
    )
