"""The host agent serving a reasoning model: a real agent heartbeats, leases, runs
the job against `tokvera target --reasoning-tokens` (thinking streamed in
``delta.reasoning_content``, as vLLM documents it: https://docs.vllm.ai/en/latest/features/
reasoning_outputs/) and completes it through the site on a live loopback server; the host's
EWMAs fold the same TTFT a scan grades: the first output token, thinking included."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.agent import Agent, AgentConfig
from benchmarks.models import Host
from scans.grader.demo_server import TargetConfig, running_target

THINKING, ANSWER = 30, 6


@pytest.mark.django_db(transaction=True)
def test_the_host_agent_folds_a_reasoning_job_at_its_first_thinking_token(net, live_server):
    host, token = net.host("thinker")
    job_id = net.submit_id(max_tokens=64)
    config = TargetConfig(ttft_ms=20, itl_ms=4, tokens=ANSWER, reasoning_tokens=THINKING)
    with running_target(config) as (target_host, port):
        agent = Agent(AgentConfig(coordinator=live_server.url, token=token,
                                  upstream=f"http://{target_host}:{port}/v1",
                                  models=("tiny-q4",), poll_s=0.05, heartbeat_s=0.5,
                                  max_jobs=1), log=lambda line: None)
        assert asyncio.run(asyncio.wait_for(agent.run(), 60)) == 0

    job = net.job(job_id)
    assert job.status in ("completed", "settled"), job.failure_reason
    assert job.completion_tokens == THINKING + ANSWER
    result = job.result_json
    assert result["thinking_chunks"] == THINKING and result["reasoning_tokens"] == THINKING
    assert job.ttft_ms < result["first_answer_ms"]  # 30 thinking tokens 4 ms apart between
    host = Host.dangerously_unscoped.get(pk=host.pk)
    assert host.ttft_ewma_ms == pytest.approx(job.ttft_ms)  # the first sample sets the EWMA
