"""An endpoint's API and agent workload: chosen in the form and the API, planned as the
grader's `--api` and `--workload agent`, run by a real worker against `tokvera target`, its
figures on the endpoint page, in the API and on a chart, and a change of either breaking the
charts like any change of load."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse

from scans.endpoints import profile
from scans.grader import PlanError
from scans.grader.demo_server import DEMO_TARGET, running_target
from scans.history.grades import grade_history
from scans.models import Endpoint, Scan
from scans.pages import charts
from scans.running import scan_columns
from scans.running import worker as scan_worker
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint, make_report
from tests.scans.conftest import NOW, scan_at
from tests.scans.endpoints.test_workload_profile import form_data, owner

AGENT = {"turns": 4, "think_time_ms": 500.0,
         "tools": {"source": "builtin", "names": ["get_weather", "search_documents"],
                   "tool_choice": "auto"},
         "structured_output": {"source": "builtin"},
         "mix": ["tools", "structured_output", "chat"]}


def agent_report(api: str = "chat", agent: dict | None = AGENT) -> dict:
    report = copy.deepcopy(make_report())
    report["plan"]["api"] = api
    report["plan"]["workload"] = {"warmup": 0, "dataset": None, "agent": agent}
    return report


# -- the profile ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_form_chooses_the_api_and_the_agent_workload(world):
    client = owner(world)
    page = client.get(reverse("endpoint-create", args=[world.team.slug])).content.decode()
    assert "API the load speaks" in page and "Responses API" in page
    assert "Agent workload" in page and "system prompt" in page
    response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                           form_data(api="responses"))
    assert response.status_code == 302, response.content.decode()[:3000]
    endpoint = Endpoint.dangerously_unscoped.get()
    assert (endpoint.api, endpoint.agent_workload) == ("responses", False)
    assert profile.plan_for(endpoint).api == "responses"
    edit = reverse("endpoint-edit", args=[endpoint.public_id])
    refused = client.post(edit, form_data(api="embeddings", agent_workload="on"))
    assert refused.status_code == 400  # shown again with the reason, nothing saved
    assert "the agent workload" in refused.content.decode()
    endpoint.refresh_from_db()
    assert (endpoint.api, endpoint.agent_workload) == ("responses", False)
    saved = client.post(edit, form_data(api="chat", agent_workload="on"))
    assert saved.status_code == 302, saved.content.decode()[:3000]
    endpoint.refresh_from_db()
    assert (endpoint.api, endpoint.agent_workload) == ("chat", True)


@pytest.mark.django_db
def test_the_agent_workload_plans_the_graders_agent_preset(world):
    endpoint = make_endpoint(world.team, agent_workload=True)
    work = profile.plan_for(endpoint).workload
    assert work.preset == "agent" and work.turns > 1 and work.think_time_ms > 0
    assert work.tools is not None and work.structured_output is not None
    assert work.shared_prefix_tokens  # the shared system prompt
    # a length the team sets stays theirs
    endpoint.output_tokens = 64
    assert profile.plan_for(endpoint).workload.output_tokens == 64
    # the worst case counts the pauses between turns; a conversation's last turn resends all
    plain = make_endpoint(world.team, name="plain")
    assert profile.worst_case_duration(endpoint) > profile.worst_case_duration(plain)
    assert (profile.tokens_per_scan(profile.plan_for(endpoint))
            > profile.tokens_per_scan(profile.plan_for(plain)))


@pytest.mark.django_db
def test_the_api_takes_the_api_and_the_agent_workload(world, api):
    created = api.post(reverse("api-endpoint-list"), {
        "name": "agents", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "levels": [1, 4], "api": "chat", "agent_workload": True}, format="json",
        **bearer(world.read_write_token))
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["api"], body["agent_workload"]) == ("chat", True)
    url = reverse("api-endpoint-detail", kwargs={"public_id": body["id"]})
    unknown = api.patch(url, {"api": "grpc"}, format="json", **bearer(world.read_write_token))
    assert unknown.status_code == 400 and "api" in unknown.json()
    refused = api.patch(url, {"api": "completions"}, format="json",
                        **bearer(world.read_write_token))
    assert refused.status_code == 422  # a prompt API carries no tools
    assert "the agent workload" in " ".join(refused.json()["scan_profile"])
    moved = api.patch(url, {"api": "completions", "agent_workload": False}, format="json",
                      **bearer(world.read_write_token))
    assert moved.status_code == 200, moved.json()
    assert (moved.json()["api"], moved.json()["agent_workload"]) == ("completions", False)
    # Anthropic's Messages API takes the agent's tool and chat sessions (it has no JSON schema)
    messages = api.patch(url, {"api": "messages", "agent_workload": True}, format="json",
                         **bearer(world.read_write_token))
    assert messages.status_code == 200, messages.json()
    endpoint = Endpoint.dangerously_unscoped.get(public_id=body["id"])
    assert list(profile.plan_for(endpoint).workload.mix) == ["tools", "chat"]


def test_a_refusal_names_the_sites_fields_not_a_longer_option():
    endpoint = Endpoint(base_url="http://127.0.0.1:8080/v1", model="m", levels=[1],
                        api="embeddings", agent_workload=True)
    with pytest.raises(PlanError) as refused:
        profile.validate_profile(endpoint)
    assert "--" not in str(refused.value)


# -- charts --------------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("change", ["api", "agent"])
def test_a_change_of_api_or_agent_workload_breaks_the_charts(world, monkeypatch, change):
    endpoint = make_endpoint(world.team)
    after = agent_report(api="responses", agent=None) if change == "api" else agent_report()
    reports = iter([agent_report(agent=None), agent_report(agent=None), after,
                    copy.deepcopy(after)])
    monkeypatch.setattr("tests.scans.conftest.report_for",
                        lambda values, version, model="tiny": next(reports))
    for i in range(4):
        scan_at(endpoint, NOW - timedelta(days=3 - i))
    points = grade_history(endpoint, NOW - timedelta(days=5), NOW)
    labels = [p.profile for p in points]
    assert labels[0] == labels[1] != labels[2] == labels[3]
    assert ("Responses API" in labels[2]) if change == "api" else (
        "agent sessions: 4 turns, tools, JSON" in labels[2])
    svg = str(charts.grade_chart(points, NOW - timedelta(days=5), NOW))
    assert 'data-breaks="1"' in svg and ">new load<" in svg


@pytest.mark.django_db
def test_a_report_from_before_other_apis_is_the_same_load_as_chat(world, monkeypatch):
    """Reports without plan.api (older graders spoke chat only) do not break the line."""
    endpoint = make_endpoint(world.team)
    old = agent_report(agent=None)
    del old["plan"]["api"]
    reports = iter([old, agent_report(agent=None)])
    monkeypatch.setattr("tests.scans.conftest.report_for",
                        lambda values, version, model="tiny": next(reports))
    for i in range(2):
        scan_at(endpoint, NOW - timedelta(days=2 - i))
    points = grade_history(endpoint, NOW - timedelta(days=5), NOW)
    assert len({p.profile for p in points}) == 1
    svg = str(charts.grade_chart(points, NOW - timedelta(days=5), NOW))
    assert 'data-breaks="0"' in svg


@pytest.mark.django_db
def test_the_load_written_by_the_worker_and_by_sql_is_one_load(world):
    """A scan's load columns, written in Python as it is stored or filled in SQL from its
    report, give the same profile: an agent's settings (an object) never differ by key order."""
    endpoint = make_endpoint(world.team)
    report = agent_report()
    stored = Scan.dangerously_unscoped.create(
        endpoint=endpoint, status="succeeded", report=report,
        **scan_worker.report_columns(report))
    filled = Scan.dangerously_unscoped.create(endpoint=endpoint, status="succeeded",
                                              report=report)
    scan_columns.fill_missing()
    rows = {row["pk"]: row for row in Scan.dangerously_unscoped.filter(
        pk__in=[stored.pk, filled.pk]).annotate(**profile.plan_columns()).values(
        "pk", *(f"pf_{name}" for name in profile.PLAN_PATHS))}
    assert rows[stored.pk] == {**rows[filled.pk], "pk": stored.pk}
    assert profile.profile_of_row(rows[stored.pk]) == profile.profile_of(report["plan"])
    with connection.cursor() as cursor:  # the text PostgreSQL's ->> gives, byte for byte
        cursor.execute("SELECT report #>> '{plan,workload,agent}' FROM scans_scan WHERE id = %s",
                       [stored.pk])
        assert rows[stored.pk]["pf_agent"] == cursor.fetchone()[0]


# -- a real scan ---------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_worker_scans_the_agent_workload_and_the_page_and_api_show_its_figures(
        world, settings, api):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(DEMO_TARGET) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1",
                                 model="tokvera-demo", levels=[1, 3], requests_per_level=6,
                                 agent_workload=True)
        scan = scan_worker.claim(Scan.dangerously_unscoped.create(
            endpoint=endpoint, trigger="schedule").pk)
        assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    assert scan.report["plan"]["workload"]["preset"]["name"] == "agent"
    levels = {level["concurrency"]: level for level in scan.agent_figures}
    assert set(levels) == {1, 3}
    top = levels[3]
    # the target answers every tool session with a valid call, every JSON session validly
    assert top["tool_calls"]["valid_share"] == 1.0 and top["tool_calls"]["called"] > 0
    assert top["structured_output"]["valid_share"] == 1.0
    assert [turn["turn"] for turn in top["turns"]] == [1, 2, 3, 4]
    assert (scan.tool_calls_valid_share, scan.json_valid_share) == (1.0, 1.0)

    client = owner(world)
    page = client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()
    assert "Agent-shaped load" in page and 'data-agent-levels' in page
    assert 'data-headline="agent"' in page and "agent sessions: 4 turns, tools, JSON" in page
    assert "100.0%" in page
    body = api.get(reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id}),
                   **bearer(world.read_only_token)).json()
    latest = body["results"][0] if "results" in body else body[0]
    assert latest["tool_calls_valid_share"] == 1.0 and latest["json_valid_share"] == 1.0
    assert [level["concurrency"] for level in latest["agent"]] == [1, 3]


@pytest.mark.django_db
def test_a_plain_scan_shows_no_agent_section(world):
    endpoint = make_endpoint(world.team)
    scan_at(endpoint, NOW - timedelta(hours=1))
    page = owner(world).get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()
    assert "Agent-shaped load" not in page
