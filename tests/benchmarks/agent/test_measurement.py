"""What the host agent measures on its upstream, against raw asyncio SSE servers on loopback:
TTFT at the first output token (the scanner's stream parser), tokens from usage, and upstream
trouble as a reason."""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx
import pytest

from benchmarks import agent
from tests.conftest import free_port
from tokvera_site.cli import UsageError

JOB = {"id": "j1", "model": "tiny-q4", "max_tokens": 16,
       "messages": [{"role": "user", "content": "hi"}]}


def _event(payload) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _delta(**delta) -> bytes:
    return _event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


async def _serve_script(script, status=200):
    """A one-route HTTP/1.1 server that answers with `script`: (pause_s, bytes) pairs."""
    seen = []

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        seen.append(json.loads(await reader.readexactly(length)))
        if status != 200:
            writer.write(f"HTTP/1.1 {status} Oops\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
                         .encode())
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            for pause, data in script:
                if pause:
                    await asyncio.sleep(pause)
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", seen


def _measure(script, status=200) -> tuple[agent.Outcome, list]:
    async def go():
        server, url, seen = await _serve_script(script, status)
        async with server, httpx.AsyncClient(trust_env=False) as client:
            return await agent.run_upstream(client, url, "upstream-name", JOB), seen
    return asyncio.run(go())


def test_ttft_is_taken_at_the_first_non_empty_content_not_the_role_chunk():
    outcome, seen = _measure([
        (0, _delta(role="assistant")),
        (0, _delta(content="")),
        (0.2, _delta(content="Hello")),
        (0, _delta(content=" world")),
        (0, _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2}})),
        (0, _event("[DONE]")),
    ])
    assert outcome.ok
    assert outcome.ttft_ms >= 200  # the role and empty chunks came at once; content 200 ms later
    assert outcome.ttft_ms <= outcome.elapsed_ms
    assert outcome.content == "Hello world" and outcome.finish_reason == "stop"
    assert seen[0]["stream"] is True and seen[0]["stream_options"] == {"include_usage": True}
    assert seen[0]["model"] == "upstream-name" and seen[0]["max_tokens"] == 16


def test_completion_tokens_come_from_the_servers_usage_when_it_reports_one():
    outcome, _ = _measure([
        (0, _delta(content="a")), (0, _delta(content="b")), (0, _delta(content="c")),
        (0, _event({"choices": [], "usage": {"completion_tokens": 7}})),
        (0, _event("[DONE]")),
    ])
    assert outcome.completion_tokens == 7 and outcome.usage_reported is True


def test_without_usage_the_agent_counts_content_chunks_and_says_so():
    outcome, _ = _measure([(0, _delta(content="a")), (0, _delta(content="b")), (0, _event("[DONE]"))])
    assert outcome.completion_tokens == 2 and outcome.usage_reported is False


def test_a_clean_stream_without_any_output_is_a_failed_job_as_in_a_scan():
    outcome, _ = _measure([
        (0, _delta(role="assistant")),
        (0, _event({"choices": [], "usage": {"completion_tokens": 0}})),
        (0, _event("[DONE]")),
    ])
    assert not outcome.ok and outcome.reason.startswith("empty_reply")
    assert outcome.ttft_ms is None and outcome.completion_tokens == 0


def test_an_upstream_error_status_becomes_a_failure_reason():
    outcome, _ = _measure([], status=500)
    assert not outcome.ok and outcome.reason == "upstream answered HTTP 500"


def test_an_unreachable_upstream_becomes_a_failure_reason():
    async def go():
        async with httpx.AsyncClient(trust_env=False) as client:
            return await agent.run_upstream(client, f"http://127.0.0.1:{free_port()}/v1", "m", JOB)
    outcome = asyncio.run(go())
    assert not outcome.ok and outcome.reason.startswith("upstream error: ConnectError")


def test_a_stream_of_events_that_are_not_json_becomes_a_failure_reason():
    outcome, _ = _measure([(0, _event("{not json"))])
    assert not outcome.ok and outcome.reason.startswith("incomplete_stream")


def test_a_stream_cut_short_is_a_failure_not_a_completion():
    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: 1000\r\n\r\n" + _delta(content="partial"))
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        async with server, httpx.AsyncClient(trust_env=False) as client:
            return await agent.run_upstream(client, url, "m", JOB)
    outcome = asyncio.run(go())
    assert not outcome.ok and outcome.reason.startswith("upstream error")


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent.add_arguments(parser)
    argv = ["--coordinator", "http://127.0.0.1:8000", "--token-env", "TEST_HOST_TOKEN",
            "--upstream", "http://127.0.0.1:9/v1", "--model", "tiny-q4", "--model", "tiny-q4"]
    args = parser.parse_args(argv)
    for name, value in overrides.items():
        setattr(args, name, value)
    return args


def test_the_token_comes_from_the_named_environment_variable(monkeypatch):
    monkeypatch.delenv("TEST_HOST_TOKEN", raising=False)
    with pytest.raises(UsageError, match="TEST_HOST_TOKEN"):
        agent.config_from_args(_args())
    monkeypatch.setenv("TEST_HOST_TOKEN", "tkv_not_a_host_token")
    with pytest.raises(UsageError, match="host token"):
        agent.config_from_args(_args())
    monkeypatch.setenv("TEST_HOST_TOKEN", "tkh_" + "x" * 40)
    config = agent.config_from_args(_args())
    assert config.token == "tkh_" + "x" * 40 and config.models == ("tiny-q4",)


def test_bad_agent_arguments_are_usage_errors(monkeypatch):
    monkeypatch.setenv("TEST_HOST_TOKEN", "tkh_" + "x" * 40)
    for overrides in ({"slots": 0}, {"coordinator": "127.0.0.1:8000"}, {"poll_s": 0}):
        with pytest.raises(UsageError):
            agent.config_from_args(_args(**overrides))


def test_a_thinking_stream_is_timed_like_a_scan_at_its_first_thinking_token():
    """llama-server and vLLM with a reasoning parser stream the thinking in
    ``delta.reasoning_content`` before the answer in ``delta.content`` (llama.cpp
    tools/server/README.md, ``--reasoning-format deepseek``; vLLM "Reasoning Outputs",
    https://docs.vllm.ai/en/latest/features/reasoning_outputs/); the usage counts both."""
    outcome, _ = _measure([
        (0, _delta(role="assistant", reasoning_content="")),
        (0.05, _delta(reasoning_content="Hmm")),
        (0, _delta(reasoning_content=", easy")),
        (0.2, _delta(content="Hi")),
        (0, _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"completion_tokens": 3,
                              "completion_tokens_details": {"reasoning_tokens": 2}}})),
        (0, _event("[DONE]")),
    ])
    assert outcome.ok and outcome.content == "Hi"  # the buyer gets the answer, not the thinking
    assert outcome.ttft_ms < outcome.first_answer_ms  # 200 ms of thinking in between
    assert (outcome.thinking_chunks, outcome.reasoning_tokens) == (2, 2)
    assert outcome.completion_tokens == 3


def test_a_job_still_thinking_when_max_tokens_runs_out_is_completed_not_failed():
    """OpenRouter's spelling, ``delta.reasoning`` ("Reasoning Tokens",
    https://openrouter.ai/docs/use-cases/reasoning-tokens), cut by ``finish_reason: length``."""
    outcome, _ = _measure([
        (0, _delta(reasoning="Let")), (0, _delta(reasoning=" me")),
        (0, _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})),
        (0, _event("[DONE]")),
    ])
    assert outcome.ok and outcome.finish_reason == "length"
    assert outcome.first_answer_ms is None and outcome.content == ""
    assert outcome.completion_tokens == 2 and outcome.usage_reported is False
