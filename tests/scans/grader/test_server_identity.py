"""report.json's ``server``: what the server says of itself (engine and version, the model's
details, its hardware), read just before the preflight from what each engine states, never guessed,
never graded. Real loopback servers answering in the shapes of vLLM, llama.cpp, TGI and SGLang
(as their own handlers write them), one that states nothing, one hostile; the `tokvera scan`
line and report.html; the comparison of two identities."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from scans.grader import ScanPlan, report_from_measurement, run_scan, server_changes, server_text
from scans.grader.demo_server import ENGINE_VERSION, MODEL_ID, TargetConfig, running_target
from scans.grader.server_identity import IDENTITY_BODY_LIMIT, IDENTITY_PATHS
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    raw_server,
    read_request,
    validate_report,
)
from tokvera_site.cli import main

MODEL = "test-model"
PROMETHEUS = "text/plain; version=0.0.4"


def _answer(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    return (b"HTTP/1.1 %d Status\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, content_type.encode(), len(body))) + body


def engine_server(answers: dict[str, bytes], stall: frozenset[str] = frozenset()):
    """A keep-alive server that streams a good reply to every chat request, answers each GET
    path in `answers` with its bytes, never answers the paths in `stall`, and 404s the rest.
    Keeps the paths it was asked."""
    asked: list[str] = []

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            path = head.split(b"\r\n")[0].split(b" ")[1].decode()
            asked.append(path)
            if path.endswith("/chat/completions"):
                writer.write(SSE_HEAD + http_chunk(good_stream()) + END_CHUNKS)
            elif path in stall:
                await asyncio.sleep(3600)
            elif path in answers:
                writer.write(answers[path])
            else:
                writer.write(_answer(404, b'{"detail":"Not Found"}'))
            await writer.drain()

    return handler, asked


def _json(obj: object) -> bytes:
    return _answer(200, json.dumps(obj).encode())


def _metrics(text: str) -> bytes:
    return _answer(200, text.encode(), PROMETHEUS)


def _scan_report(port: int, **kwargs) -> dict:
    plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL, levels=(1,),
                    requests=2, timeout_s=kwargs.pop("timeout_s", 10.0), max_tokens=16,
                    **kwargs)
    report = report_from_measurement(plan, run_scan(plan))
    validate_report(report)
    return report


# -- each engine, in its own shape ---------------------------------------------------------------

# vLLM: /version (entrypoints/openai/api_server.py, show_version), its ModelCard in /v1/models
# (owned_by "vllm", root, max_model_len), vllm: metrics with model_name, cache_config_info; and
# a DCGM exporter's metric in the same text, which names the GPU.
VLLM = {
    "/version": _json({"version": "0.11.0"}),
    "/v1/models": _json({"object": "list", "data": [{
        "id": MODEL, "object": "model", "created": 1764806400, "owned_by": "vllm",
        "root": "Qwen/Qwen3-8B", "parent": None, "max_model_len": 32768, "permission": []}]}),
    "/metrics": _metrics(
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0\n'
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="27000"} 1.0\n'
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"} 0\n'),
}

# llama.cpp: /props (tools/server/server-context.cpp, get_props) and its /v1/models entry with
# meta (owned_by "llamacpp", n_ctx, n_params, ftype), llamacpp: metrics.
LLAMA_CPP = {
    "/props": _json({
        "default_generation_settings": {"params": {"n_predict": -1, "temperature": 0.8},
                                        "n_ctx": 8192},
        "total_slots": 4, "model_alias": MODEL,
        "model_path": "/models/Qwen3-8B-Q4_K_M.gguf",
        "modalities": {"vision": False, "audio": False},
        "chat_template": "{% for message in messages %}{{ message.content }}{% endfor %}",
        "build_info": "b6790-a1b2c3d"}),
    "/v1/models": _json({"object": "list", "data": [{
        "id": MODEL, "object": "model", "created": 1764806400, "owned_by": "llamacpp",
        "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx": 8192, "n_ctx_train": 40960,
                 "n_embd": 4096, "n_params": 8190735360, "size": 5027783488,
                 "ftype": "Q4_K - Medium"}}]}),
    "/metrics": _metrics("# TYPE llamacpp:prompt_tokens_total counter\n"
                         "llamacpp:prompt_tokens_total 12\n"),
}

# TGI: /info (router/src/lib.rs, struct Info; model_dtype and model_device_type are in
# releases before 2.x), /v1/models whose owned_by is the model id, tgi_ metrics.
TGI = {
    "/info": _json({
        "model_id": "bigscience/bloom-560m", "model_sha": "e985a63cdc139290c5f700ff1929f0b5942cced2",
        "model_dtype": "torch.float16", "model_device_type": "cuda",
        "model_pipeline_tag": "text-generation", "max_concurrent_requests": 128,
        "max_best_of": 2, "max_stop_sequences": 4, "max_input_tokens": 1024,
        "max_total_tokens": 2048, "validation_workers": 2, "max_client_batch_size": 4,
        "router": "text-generation-router", "version": "3.3.6", "sha": None,
        "docker_label": None}),
    "/v1/models": _json({"object": "list", "data": [{
        "id": "bigscience/bloom-560m", "object": "model", "created": 0,
        "owned_by": "bigscience/bloom-560m"}]}),
    "/metrics": _metrics("# TYPE tgi_request_count counter\ntgi_request_count 3\n"),
}

# SGLang: /get_server_info (srt/entrypoints/http_server.py: its server arguments, scheduler
# info, internal states and version), its ModelCard (owned_by "sglang", max_model_len).
SGLANG = {
    "/get_server_info": _json({
        "model_path": "Qwen/Qwen2.5-7B-Instruct", "tokenizer_path": "Qwen/Qwen2.5-7B-Instruct",
        "served_model_name": MODEL, "dtype": "bfloat16", "quantization": "fp8",
        "context_length": None, "device": "cuda", "tp_size": 2, "dp_size": 1,
        "max_total_num_tokens": 500000, "max_req_input_len": 131066,
        "internal_states": [{"avg_spec_accept_length": None}], "version": "0.5.4"}),
    "/v1/models": _json({"object": "list", "data": [{
        "id": MODEL, "object": "model", "created": 1764806400, "owned_by": "sglang",
        "root": MODEL, "max_model_len": 131072}]}),
    "/metrics": _metrics(
        "# TYPE sglang:num_running_reqs gauge\n"
        f'sglang:num_running_reqs{{model_name="{MODEL}"}} 0.0\n'),
}


def test_vllm_states_its_version_model_context_kv_cache_and_gpu():
    handler, asked = engine_server(VLLM)
    with raw_server(handler) as port:
        server = _scan_report(port)["server"]
    assert server["engine"] == "vLLM"
    assert server["engine_version"] == "0.11.0"
    assert server["model"] == {"id": MODEL, "root": "Qwen/Qwen3-8B", "max_model_len": 32768,
                               "dtype": None, "quantization": None, "parameters": None}
    assert server["hardware"]["gpu_names"] == ["NVIDIA H100 80GB HBM3"]
    assert server["hardware"]["kv_cache"] == {"block_size": "16", "cache_dtype": "auto",
                                              "num_gpu_blocks": "27000",
                                              "gpu_memory_utilization": "0.9"}
    assert server["hardware"]["device"] is None  # vLLM does not say: never guessed
    assert server["sources"]["engine"] == f"http://127.0.0.1:{port}/v1/models"
    assert server["sources"]["engine_version"] == f"http://127.0.0.1:{port}/version"
    assert server["sources"]["hardware.gpu_names"] == f"http://127.0.0.1:{port}/metrics"
    # the identity GETs are at the server's root, once each, and /metrics is read once
    assert sorted(p for p in asked if p in IDENTITY_PATHS) == sorted(IDENTITY_PATHS)
    assert asked.count("/metrics") == 1
    assert server_text(server) == ("vLLM 0.11.0 · test-model · ctx 32,768 · "
                                   "NVIDIA H100 80GB HBM3")


def test_llama_cpp_states_its_build_context_quantization_and_parameters():
    handler, _ = engine_server(LLAMA_CPP)
    with raw_server(handler) as port:
        server = _scan_report(port)["server"]
    assert server["engine"] == "llama.cpp"
    assert server["engine_version"] == "b6790-a1b2c3d"
    assert server["model"] == {"id": MODEL, "root": "/models/Qwen3-8B-Q4_K_M.gguf",
                               "max_model_len": 8192, "dtype": None,
                               "quantization": "Q4_K - Medium", "parameters": 8190735360}
    assert server["sources"]["engine_version"] == f"http://127.0.0.1:{port}/props"
    assert server_text(server) == ("llama.cpp b6790-a1b2c3d · test-model · ctx 8,192 · "
                                   "Q4_K - Medium · 8.19B parameters")


def test_tgi_states_its_version_model_dtype_and_device_in_info():
    handler, _ = engine_server(TGI)
    with raw_server(handler) as port:
        server = _scan_report(port)["server"]
    assert server["engine"] == "TGI"
    assert server["engine_version"] == "3.3.6"
    # /v1/models lists the model under its own id, not the one asked for: /info names it
    assert server["model"]["id"] == "bigscience/bloom-560m"
    assert server["model"]["max_model_len"] == 2048
    assert server["model"]["dtype"] == "torch.float16"
    assert server["hardware"]["device"] == "cuda"
    assert server["sources"]["model.id"] == f"http://127.0.0.1:{port}/info"


def test_sglang_states_its_server_arguments_and_version():
    handler, _ = engine_server(SGLANG)
    with raw_server(handler) as port:
        server = _scan_report(port)["server"]
    assert server["engine"] == "SGLang"
    assert server["engine_version"] == "0.5.4"
    assert server["model"] == {"id": MODEL, "root": "Qwen/Qwen2.5-7B-Instruct",
                               "max_model_len": 131072, "dtype": "bfloat16",
                               "quantization": "fp8", "parameters": None}
    assert server["hardware"]["device"] == "cuda"
    assert server["hardware"]["tensor_parallel_size"] == 2
    assert server_text(server) == ("SGLang 0.5.4 · test-model · ctx 131,072 · fp8 · cuda · "
                                   "tensor parallel 2")


# -- a server that states nothing, and one that misbehaves ---------------------------------------

def test_a_server_that_states_nothing_scans_as_usual_with_every_fact_null():
    handler, _ = engine_server({})  # even /models is a 404
    with raw_server(handler) as port:
        report = _scan_report(port)
    server = report["server"]
    assert server["engine"] is None and server["engine_version"] is None
    assert set(server["model"].values()) == {None}
    assert set(server["hardware"].values()) == {None}
    assert server["sources"] == {}
    assert [(a["answered"], a["detail"]) for a in server["asked"]] == [(False, "HTTP 404")] * 4
    assert report["score"]["grade"] == "A"  # nothing here is graded
    assert server_text(server) == "not stated"


def test_a_hostile_server_neither_hangs_the_scan_nor_is_read_beyond_its_limits():
    nested = b"[" * 100_000 + b"]" * 100_000  # within the size limit, too deep to parse
    answers = {
        "/version": _answer(200, b'{"version": "' + b"9" * (4 * IDENTITY_BODY_LIMIT) + b'"}'),
        "/props": _answer(200, b"<html><body>It works!</body></html>", "text/html"),
        "/get_server_info": _answer(200, nested),
        "/v1/models": _json({"object": "list", "data": [{"id": MODEL, "owned_by": ["vllm"],
                                                         "max_model_len": "a lot"}]}),
        "/metrics": _answer(200, b"<html>metrics</html>", "text/html"),
    }
    handler, _ = engine_server(answers, stall=frozenset({"/info"}))
    with raw_server(handler) as port:
        report = _scan_report(port, timeout_s=2.0)
    server = report["server"]
    details = {a["url"].rsplit("/", 1)[1]: a["detail"] for a in server["asked"]}
    assert details["version"] == "HTTP 200, an answer over 256 KiB (not read)"
    assert details["props"] == "HTTP 200, not JSON"
    assert details["get_server_info"] == "HTTP 200, not JSON"
    assert details["info"].startswith("timeout")
    assert server["engine"] is None and server["engine_version"] is None
    assert server["model"]["id"] == MODEL and server["model"]["max_model_len"] is None
    assert report["score"]["grade"] in ("A", "B", "C", "D", "F")  # the scan went on


def test_the_identity_requests_are_never_in_flight_beside_a_stream():
    """A gateway that counts every request against one slot would refuse a stream sent while
    a slow identity GET held it: the identity is asked before the preflight's probe."""
    state = {"identity_in_flight": 0, "streams_beside_identity": 0}

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            path = head.split(b"\r\n")[0].split(b" ")[1].decode()
            if path.endswith("/chat/completions"):
                await asyncio.sleep(0.05)  # an identity GET sent beside it has arrived by now
                if state["identity_in_flight"]:
                    state["streams_beside_identity"] += 1
                    writer.write(_answer(429, b'{"error":{"message":"one at a time"}}'))
                else:
                    writer.write(SSE_HEAD + http_chunk(good_stream()) + END_CHUNKS)
            elif path in IDENTITY_PATHS:
                state["identity_in_flight"] += 1
                try:
                    await asyncio.sleep(0.2)
                    writer.write(_answer(404, b'{"detail":"Not Found"}'))
                finally:
                    state["identity_in_flight"] -= 1
            else:
                writer.write(_answer(404, b'{"detail":"Not Found"}'))
            await writer.drain()

    with raw_server(handler) as port:
        report = _scan_report(port)
    assert state["streams_beside_identity"] == 0
    assert report["preflight"]["probe"]["outcome"] == "succeeded"
    assert report["score"]["grade"] == "A"


def test_the_identity_requests_go_through_the_connect_guard():
    refused: list[tuple[str, int]] = []

    def guard(host: str, port: int, ip: str) -> None:
        refused.append((host, port))
        raise PermissionError("not allowed")

    handler, asked = engine_server(VLLM)
    with raw_server(handler) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL, levels=(1,),
                        requests=1, timeout_s=5.0, max_tokens=16)
        measurement = run_scan(plan, connect_guard=guard)
    assert asked == []  # not one request reached the server
    assert len(refused) >= 2 + len(IDENTITY_PATHS)  # /models, the probe, each identity GET
    assert measurement.server is not None
    assert all(not a["answered"] and "ConnectionRefusedByGuard" in a["detail"]
               for a in measurement.server["asked"])


# -- where it is shown ---------------------------------------------------------------------------

def _server_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("tokvera scan: server:")]
    assert len(lines) == 1, out
    return lines[0].removeprefix("tokvera scan: ")


def test_tokvera_scan_prints_the_server_line_and_report_html_shows_it(tmp_path: Path, capsys,
                                                                     monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    handler, _ = engine_server(VLLM)
    with raw_server(handler) as port:
        assert main(["scan", f"http://127.0.0.1:{port}/v1", "--model", MODEL,
                     "--concurrency", "1", "--requests", "2", "--timeout", "5",
                     "--out", str(tmp_path)]) == 0
    assert _server_line(capsys.readouterr().out) == (
        "server: vLLM 0.11.0 · test-model · ctx 32,768 · NVIDIA H100 80GB HBM3")
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    html = (tmp_path / "report.html").read_text()
    assert "Server: vLLM 0.11.0 · test-model · ctx 32,768 · NVIDIA H100 80GB HBM3" in html


def test_a_tokvera_target_scan_shows_the_targets_own_identity(tmp_path: Path, capsys,
                                                              monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, max_model_len=4096,
                                      max_concurrency=2)) as (host, port):
        assert main(["scan", f"http://{host}:{port}/v1", "--model", MODEL_ID,
                     "--concurrency", "1,2", "--requests", "4", "--timeout", "5",
                     "--out", str(tmp_path)]) == 0
    assert _server_line(capsys.readouterr().out) == (
        f"server: tokvera target {ENGINE_VERSION} · {MODEL_ID} · ctx 4,096")
    server = json.loads((tmp_path / "report.json").read_text())["server"]
    assert server["engine"] == "tokvera target"
    assert server["sources"]["engine"].endswith("/v1/models")  # its owned_by
    assert server["sources"]["engine_version"].endswith("/version")
    assert server["model"]["root"] == MODEL_ID  # from its llama.cpp-shaped /props


def test_a_report_from_before_the_identity_prints_no_server_line():
    from scans.grader.report_text import cli_notes

    assert not any(line.startswith("server:") for line in cli_notes({"measurements": {}}))
    assert cli_notes({"server": None, "measurements": {}})[0] == "server: not stated"


# -- comparing two scans' identities -------------------------------------------------------------

def _identity(version="0.10.2", gpus=("NVIDIA A100-SXM4-80GB",), engine="vLLM",
              context=32768, device=None) -> dict:
    return {"engine": engine, "engine_version": version,
            "model": {"id": MODEL, "root": "Qwen/Qwen3-8B", "max_model_len": context,
                      "dtype": None, "quantization": None, "parameters": None},
            "hardware": {"device": device, "gpu_names": list(gpus) if gpus else None,
                         "tensor_parallel_size": None, "kv_cache": None},
            "sources": {}}


def test_the_same_identity_is_no_change():
    assert server_changes(_identity(), _identity()) == []


def test_an_engine_upgrade_is_named_with_both_versions():
    assert server_changes(_identity(), _identity(version="0.11.0")) == [
        "engine version 0.10.2 → 0.11.0"]


def test_new_gpus_are_a_hardware_change():
    assert server_changes(_identity(), _identity(gpus=("NVIDIA H100 80GB HBM3",) * 2)) == [
        "hardware changed (GPUs NVIDIA A100-SXM4-80GB → 2 × NVIDIA H100 80GB HBM3)"]


def test_another_engine_and_context_are_each_named():
    assert server_changes(_identity(), _identity(engine="SGLang", version="0.5.4",
                                                 context=8192)) == [
        "engine vLLM → SGLang", "engine version 0.10.2 → 0.5.4",
        "context length 32,768 → 8,192"]


@pytest.mark.parametrize("before, after", [
    (None, _identity()),                                  # a report from before
    (_identity(version=None), _identity()),               # /version did not answer once
    (_identity(gpus=()), _identity()),                    # no GPU stated
    ({"engine": "vLLM"}, _identity()),                    # a partial object
])
def test_a_fact_only_one_scan_states_is_unknown_not_a_change(before, after):
    assert server_changes(before, after) == []
    assert server_changes(after, before) == []
