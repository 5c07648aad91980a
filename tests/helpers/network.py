"""Factories for the network's tests, in one place: the catalog, a network driven through its
HTTP API (`Net`: an operator team, two buyer teams, host and buyer calls), and one built from
stored rows (`make_host`, `make_job`, `build_network`: chosen heartbeats, EWMAs, outcomes and
times, for the public figures)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rest_framework.test import APIClient

from accounts import teams
from benchmarks.models import CatalogModel, Host, Job, JobStatus
from benchmarks.network import hosts
from tests.conftest import bearer, make_user

# A fixed, tz-aware start for time-machine; tests move forward from here.
T0 = datetime(2030, 1, 7, 12, 0, 0, tzinfo=UTC)


def make_catalog(model_id: str = "tiny-q4", context_len: int = 4096, active: bool = True,
                 quant: str = "Q4_K_M", display_name: str | None = None) -> CatalogModel:
    return CatalogModel.objects.create(id=model_id, display_name=display_name or model_id.title(),
                                       quant=quant, context_len=context_len, active=active)


@dataclass
class Net:
    """A team that operates hosts, two buyer teams, and HTTP helpers for both sides."""

    operator: object
    buyer: object
    buyer_token: str
    other_buyer: object
    other_buyer_token: str
    client: APIClient = field(default_factory=APIClient)
    tokens: dict = field(default_factory=dict)  # host name -> token (shown once, kept here)

    def host(self, name: str, models=("tiny-q4",), slots: int = 1, trust: str = "software",
             heartbeat: bool = True, **facts) -> tuple[Host, str]:
        """A host with a token; by default it has heartbeated (so it is online)."""
        host, token = hosts.create_host(self.operator, name, trust)
        if facts:
            Host.dangerously_unscoped.filter(pk=host.pk).update(**facts)
        if heartbeat:
            response = self.heartbeat(token, list(models), slots=slots)
            assert response.status_code == 200, response.content
        host.refresh_from_db()
        self.tokens[name] = token
        return host, token

    # host side
    def heartbeat(self, token, models, slots=1, hardware=None, **extra):
        body = {"models": models, "slots": slots, **({"hardware": hardware} if hardware else {})}
        return self.client.post("/v1/hosts/heartbeat", body, format="json", **bearer(token), **extra)

    def lease(self, token):
        return self.client.post("/v1/hosts/lease", format="json", **bearer(token))

    def start(self, token, job_id):
        return self.client.post(f"/v1/jobs/{job_id}/start", format="json", **bearer(token))

    def complete(self, token, job_id, ttft_ms=100.0, completion_tokens=10, elapsed_ms=500.0,
                 result=None):
        body = {"ttft_ms": ttft_ms, "completion_tokens": completion_tokens,
                "elapsed_ms": elapsed_ms, "result": result or {"content": "ok"}}
        return self.client.post(f"/v1/jobs/{job_id}/complete", body, format="json", **bearer(token))

    def fail(self, token, job_id, reason="cannot load quant"):
        return self.client.post(f"/v1/jobs/{job_id}/fail", {"reason": reason}, format="json",
                                **bearer(token))

    def run(self, token, **figures) -> str:
        """Lease, start and complete one job; returns its id."""
        leased = self.lease(token)
        assert leased.status_code == 200, (leased.status_code, leased.content)
        job_id = leased.json()["id"]
        assert self.start(token, job_id).status_code == 200
        done = self.complete(token, job_id, **figures)
        assert done.status_code == 200, done.content
        return job_id

    # buyer side
    def submit(self, token=None, model="tiny-q4", max_tokens=64, content="hello", **extra):
        body = {"model": model, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": content}]}
        return self.client.post("/v1/jobs", body, format="json", **bearer(token or self.buyer_token),
                                **extra)

    def submit_id(self, token=None, **kwargs) -> str:
        response = self.submit(token, **kwargs)
        assert response.status_code == 202, response.content
        return response.json()["id"]

    def job(self, job_id) -> Job:
        return Job.dangerously_unscoped.get(pk=job_id)


def build_net() -> Net:
    operator = teams.create_team("hostops", "Host Ops", owner=make_user("hostops-owner"))
    buyer = teams.create_team("buyer", "Buyer", owner=make_user("buyer-owner"))
    other = teams.create_team("other-buyer", "Other Buyer", owner=make_user("other-owner"))
    return Net(
        operator=operator,
        buyer=buyer,
        buyer_token=teams.issue_token(buyer, "read-write")[1],
        other_buyer=other,
        other_buyer_token=teams.issue_token(other, "read-write")[1],
    )


# Bodies that must never reach a public surface (the privacy tests look for them).
SECRET_PROMPT = "prompt-body-7c1e-please-never-publish"


SECRET_RESULT = "completion-body-93ab-never-published"


def make_host(team, name: str, trust: str = "software", *, models=(), seen_ago_s: float | None = 10,
              ttft: float | None = None, tps: float | None = None, gpu: str = "",
              suspended: bool = False, revoked: bool = False, now: datetime = T0) -> Host:
    """A host as the coordinator stores it: last heartbeat `seen_ago_s` before `now` (None: never),
    advertising `models`, with the EWMAs its folded jobs gave it."""
    host = Host.dangerously_unscoped.create(
        team=team, name=name, trust_level=trust,
        token_prefix=None if revoked else f"tkh_{uuid.uuid4().hex[:8]}",
        token_hmac="" if revoked else "h" * 64,
        revoked_at=now - timedelta(hours=1) if revoked else None,
        suspended=suspended,
        last_heartbeat_at=None if seen_ago_s is None else now - timedelta(seconds=seen_ago_s),
        advertised=sorted(models), gpu_model=gpu, vram_mb=24576 if gpu else None,
        cpu_model=f"cpu of {name}", ttft_ewma_ms=ttft, tps_ewma=tps,
    )
    host.catalog_models.set(list(models))
    return host


def make_job(team, model: str, status: str = JobStatus.COMPLETED, *, host: Host | None = None,
             settled_ago: timedelta | None = timedelta(days=1), latency_ms: float = 500.0,
             tokens: int | None = 32, now: datetime = T0) -> Job:
    """A job settled `settled_ago` before `now`; a completed one took `latency_ms` from
    submission to completion. Unsettled statuses get no settled_at (the database insists)."""
    settled = status in (JobStatus.COMPLETED, JobStatus.FAILED)
    settled_at = now - settled_ago if settled else None
    created_at = (settled_at - timedelta(milliseconds=latency_ms) if settled
                  else now - timedelta(minutes=5))
    completed = status == JobStatus.COMPLETED
    return Job.dangerously_unscoped.create(
        team=team, model_id=model, status=status, host=host, max_tokens=64,
        request_json={"messages": [{"role": "user", "content": SECRET_PROMPT}], "max_tokens": 64},
        result_json={"content": SECRET_RESULT} if completed else None,
        created_at=created_at, queued_at=created_at,
        leased_at=created_at if host else None,
        started_at=created_at if host and status != JobStatus.LEASED else None,
        completed_at=settled_at if completed else None,
        settled_at=settled_at,
        folded_at=settled_at,
        ttft_ms=min(latency_ms, 150.0) if completed and tokens else None,
        completion_tokens=tokens if completed else None,
        elapsed_ms=latency_ms if completed else None,
        attempts=1 if host else 0,
        failure_reason="host: cannot load quant" if status == JobStatus.FAILED else "",
    )


@dataclass
class Network:
    operator: object
    other_operator: object
    buyer: object
    hosts: dict = field(default_factory=dict)
    jobs: list = field(default_factory=list)

    def identifiers(self) -> list[str]:
        """Every host and team identifier (and every body) that must never be published."""
        found = [SECRET_PROMPT, SECRET_RESULT]
        for team in (self.operator, self.other_operator, self.buyer):
            found += [team.slug, team.name]
            for membership in team.memberships.all():
                found += [membership.user.username, membership.user.email]
        for host in self.hosts.values():
            found += [host.name, str(host.public_id), f"cpu of {host.name}"]
            if host.token_prefix:
                found.append(host.token_prefix)
        found += [str(job.id) for job in self.jobs]
        return found


def build_network(now: datetime = T0) -> Network:
    """The hand-built network of tests/benchmarks/public/test_hand_built_network.py (figures there).

    Models: alpha-q4 and beta-q8 are active, retired-q4 is not.
    Hosts (operator team "ursula-hosting"; none-b and retired are run by "vortex-rigs"):
      none-a   none      seen 10 s ago   alpha         ttft 200.4  tps 40.25  RTX 4090
      none-b   none      seen 45 s ago   alpha, beta   ttft 400    tps 55.55  RTX 4090 (vortex)
      soft-a   software  seen 3 s ago    alpha         ttft 120    tps 60     A100 80GB
      soft-old software  seen 46 s ago   alpha         ttft 50     tps 100    (offline)
      edr-new  edr       seen 1 s ago    alpha, beta   no EWMA yet            no GPU reported
      susp     software  seen 2 s ago    alpha         suspended              (offline)
      gone     none      revoked                        alpha                 (offline)
      never    none      never heartbeated              alpha                 (offline)
      retired  none      seen 5 s ago    retired only  ttft 10     tps 999    M2 Ultra (vortex)
    """
    operator = teams.create_team("ursula-hosting", "Ursula Hosting Collective",
                                 owner=make_user("ursula-operator"))
    other = teams.create_team("vortex-rigs", "Vortex Rigs Ltd", owner=make_user("vortex-admin"))
    buyer = teams.create_team("zephyr-buyers", "Zephyr Buyers GmbH", owner=make_user("zephyr-buyer"))
    make_catalog("alpha-q4", quant="Q4_K_M", context_len=8192, display_name="Alpha 7B")
    make_catalog("beta-q8", quant="Q8_0", context_len=32768, display_name="Beta 13B")
    make_catalog("retired-q4", context_len=8192, active=False, display_name="Retired 1B")
    net = Network(operator=operator, other_operator=other, buyer=buyer)
    h = net.hosts
    h["none-a"] = make_host(operator, "ursula-box-none-a", "none", models=["alpha-q4"], seen_ago_s=10,
                            ttft=200.4, tps=40.25, gpu="RTX 4090", now=now)
    h["none-b"] = make_host(other, "vortex-box-none-b", "none", models=["alpha-q4", "beta-q8"],
                            seen_ago_s=45, ttft=400.0, tps=55.55, gpu="RTX 4090", now=now)
    h["soft-a"] = make_host(operator, "ursula-box-soft-a", "software", models=["alpha-q4"],
                            seen_ago_s=3, ttft=120.0, tps=60.0, gpu="A100 80GB", now=now)
    h["soft-old"] = make_host(operator, "ursula-box-soft-old", "software", models=["alpha-q4"],
                              seen_ago_s=46, ttft=50.0, tps=100.0, gpu="H100", now=now)
    h["edr-new"] = make_host(operator, "ursula-box-edr-new", "edr", models=["alpha-q4", "beta-q8"],
                             seen_ago_s=1, now=now)
    h["susp"] = make_host(operator, "ursula-box-suspended", "software", models=["alpha-q4"],
                          seen_ago_s=2, ttft=1.0, tps=1.0, gpu="H100", suspended=True, now=now)
    h["gone"] = make_host(operator, "ursula-box-revoked", "none", models=["alpha-q4"], seen_ago_s=2,
                          ttft=1.0, tps=1.0, gpu="H100", revoked=True, now=now)
    h["never"] = make_host(operator, "ursula-box-never", "none", models=["alpha-q4"], seen_ago_s=None,
                           now=now)
    h["retired"] = make_host(other, "vortex-box-retired", "none", models=["retired-q4"], seen_ago_s=5,
                             ttft=10.0, tps=999.0, gpu="M2 Ultra", now=now)

    def job(model, status=JobStatus.COMPLETED, host="soft-a", **kw):
        net.jobs.append(make_job(buyer, model, status, host=h[host] if host else None, now=now, **kw))

    day = timedelta(days=1)
    # alpha-q4 inside 7 days: four completed (one with no tokens), one failed.
    job("alpha-q4", latency_ms=100, settled_ago=day)
    job("alpha-q4", latency_ms=300, settled_ago=2 * day, host="none-a")
    job("alpha-q4", latency_ms=812, settled_ago=3 * day, host="none-b")
    job("alpha-q4", latency_ms=500, settled_ago=6 * day, tokens=0)
    job("alpha-q4", JobStatus.FAILED, settled_ago=timedelta(hours=5))
    # alpha-q4 inside 30 days only: exactly 7 days old is outside 7d; two failed no_host jobs.
    job("alpha-q4", latency_ms=2000, settled_ago=7 * day)
    job("alpha-q4", latency_ms=1500, settled_ago=10 * day, host="soft-old")
    job("alpha-q4", JobStatus.FAILED, settled_ago=20 * day, host=None)
    job("alpha-q4", JobStatus.FAILED, settled_ago=30 * day - timedelta(seconds=1), host=None)
    # alpha-q4 never counted: exactly 30 days old, older, after the clock, unsettled.
    job("alpha-q4", latency_ms=9, settled_ago=30 * day)
    job("alpha-q4", latency_ms=9, settled_ago=31 * day)
    job("alpha-q4", latency_ms=9, settled_ago=-timedelta(hours=1))
    job("alpha-q4", JobStatus.FAILED, settled_ago=-timedelta(minutes=1))
    job("alpha-q4", JobStatus.QUEUED, host=None)
    job("alpha-q4", JobStatus.LEASED)
    job("alpha-q4", JobStatus.RUNNING)
    # beta-q8: one failed job 8 days ago, one still running.
    job("beta-q8", JobStatus.FAILED, settled_ago=8 * day, host="none-b")
    job("beta-q8", JobStatus.RUNNING, host="none-b")
    # retired-q4: inactive, so never published even with jobs.
    job("retired-q4", latency_ms=50, settled_ago=day, host="retired")
    return net


def heartbeat_cases(token: str, revoked: str) -> list[tuple[str, dict, bytes]]:
    """(name, headers, body) of a heartbeat for each way one can be answered: every server of
    heartbeats must answer each exactly as the Django view does."""
    good = b'{"models": ["tiny-q4"], "slots": 2, "hardware": {"gpu_model": "RTX 4090"}}'
    return [
        ("steady host", {"Authorization": f"Bearer {token}"}, good),
        ("no credentials", {}, good),
        ("not a host token", {"Authorization": "Bearer tkv_" + "x" * 30}, good),
        ("revoked token", {"Authorization": f"Bearer {revoked}"}, good),
        ("not JSON", {"Authorization": f"Bearer {token}"}, b"{nope"),
        ("slots as a string", {"Authorization": f"Bearer {token}"},
         b'{"models": ["tiny-q4"], "slots": "2"}'),
        ("unknown model", {"Authorization": f"Bearer {token}"}, b'{"models": ["huge-fp16"]}'),
        ("too deep", {"Authorization": f"Bearer {token}"}, b'{"models": ' + b"[" * 100 + b"]" * 100 + b"}"),
        ("over 64 KiB", {"Authorization": f"Bearer {token}"},
         b'{"models": ["tiny-q4"], "pad": "' + b"x" * 70_000 + b'"}'),
    ]


def assert_heartbeats_answered_as_the_view(server, token: str, revoked: str) -> None:
    """Each of `heartbeat_cases` posted to `server` (an httpx client of a real server) and to
    the Django view: the same status, bytes, challenge and Retry-After, and Django's JSON headers."""
    view = APIClient()
    for name, headers, body in heartbeat_cases(token, revoked):
        served = server.post("/v1/hosts/heartbeat", content=body,
                             headers={"Content-Type": "application/json", **headers})
        django = view.generic("POST", "/v1/hosts/heartbeat", body, "application/json",
                              **({"HTTP_AUTHORIZATION": headers["Authorization"]} if headers else {}))
        assert served.status_code == django.status_code, name
        assert served.content == django.content, name  # the same bytes
        assert served.headers.get("WWW-Authenticate") == django.get("WWW-Authenticate"), name
        assert served.headers.get("Retry-After") == django.get("Retry-After"), name
        assert served.headers["Content-Type"] == "application/json", name
        assert served.headers["X-Content-Type-Options"] == "nosniff", name
