"""What the server says of itself: its engine and version, the model's details and its hardware
(report.json's ``server``). Only what a server states is kept, never a guess; nothing here is
graded.

Where each engine states it (read in their source):

- vLLM: ``GET /version`` ``{"version"}``; its /models entries (``owned_by: "vllm"``, ``root``,
  ``max_model_len``); metrics named ``vllm:*``, ``vllm:cache_config_info`` whose labels state
  the KV cache (``block_size``, ``num_gpu_blocks``, ``cache_dtype``...).
- llama.cpp: ``GET /props`` (``build_info``, ``model_path``, ``model_alias``, ``model_ftype``,
  ``default_generation_settings.n_ctx``: the context of one slot); its /models entries
  (``owned_by: "llamacpp"``, ``meta.n_params``, ``meta.n_ctx``, ``meta.ftype``); ``llamacpp:*``.
- TGI: ``GET /info`` (``model_id``, ``version``, ``max_total_tokens``; older releases also
  ``model_dtype`` and ``model_device_type``); ``tgi_*`` metrics.
- SGLang: ``GET /get_server_info`` (its server arguments: ``model_path``, ``dtype``,
  ``quantization``, ``context_length``, ``tp_size``, ``device``; and ``version``); its /models
  entries (``owned_by: "sglang"``, ``max_model_len``); ``sglang:*``.

The extra requests (``IDENTITY_PATHS``) go to the server's root, the origin the /metrics probe
reads, with the scan's client (so through its connect guard): each bounded by
``IDENTITY_TIMEOUT_S`` and ``IDENTITY_BODY_LIMIT``, only a JSON object read, any failure kept as
a detail and the fact left "not stated" (null). The /models entry and the metric names come
from what the preflight and the /metrics probe read anyway.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .measurement import MetricsProbe, ModelsListing

__all__ = [
    "IDENTITY_BODY_LIMIT",
    "IDENTITY_PATHS",
    "IDENTITY_TIMEOUT_S",
    "MetricsStatements",
    "Statement",
    "entry_facts",
    "read_statements",
    "server_identity",
]

#: The GETs a scan adds, at the server's root: one per engine that states itself there.
IDENTITY_PATHS = ("/version", "/props", "/info", "/get_server_info")
#: Each of them gives up after this long (or the scan's --timeout, if shorter).
IDENTITY_TIMEOUT_S = 5.0
#: An answer larger than this is not read (llama.cpp's /props carries its chat template).
IDENTITY_BODY_LIMIT = 256 * 1024
#: A stated text longer than this is cut: a name, a path or a version, never a document.
TEXT_CHARS = 200
#: At most this many GPU names are kept.
GPU_NAMES_KEPT = 16

#: Servers that write their own name into every /models entry's ``owned_by``.
OWNED_BY_ENGINE = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp",
                   "tokvera": "tokvera target"}
#: The metric-name prefix each engine's Prometheus text uses.
METRIC_PREFIX_ENGINE = {"vllm:": "vLLM", "sglang:": "SGLang", "llamacpp:": "llama.cpp",
                        "tgi_": "TGI", "tokvera_target_": "tokvera target"}
#: vLLM's info metric whose labels state the KV cache, and the labels kept from it.
CACHE_CONFIG_METRIC = "vllm:cache_config_info"
CACHE_CONFIG_LABELS = ("block_size", "cache_dtype", "num_gpu_blocks", "gpu_memory_utilization",
                       "kv_cache_memory_bytes")
#: A DCGM exporter's label that names the GPU (when the server's /metrics carries DCGM's).
DCGM_GPU_NAME = "modelName"
#: llama.cpp's file types that are a plain float format (a dtype) rather than a quantization.
FLOAT_FTYPES = {"f32": "float32", "all f32": "float32", "f16": "float16", "mostly f16": "float16",
                "bf16": "bfloat16", "mostly bf16": "bfloat16"}


@dataclass
class Statement:
    """One identity GET: its URL, the JSON object it answered (None when it did not), and what
    happened in a few words ("HTTP 200", "HTTP 404", "timeout", "not JSON"...)."""

    url: str
    body: dict | None = None
    detail: str = ""

    def as_dict(self) -> dict:
        return {"url": self.url, "answered": self.body is not None, "detail": self.detail}


async def read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """A streamed answer's body, or None as soon as it passes `limit` bytes (the rest is never
    read: a hostile server's endless answer costs at most the limit)."""
    body = bytearray()
    async for piece in response.aiter_bytes():
        body += piece
        if len(body) > limit:
            return None
    return bytes(body)


async def _get_json(client: httpx.AsyncClient, url: str, timeout: float) -> Statement:
    """``GET url``: never raises; only a 2xx JSON object within the body limit counts."""
    statement = Statement(url)
    try:
        async with asyncio.timeout(timeout):
            # Its own connection, closed after: the load's idle connections stay as they were.
            async with client.stream("GET", url, headers={"accept": "application/json",
                                                          "connection": "close"}) as response:
                if not 200 <= response.status_code < 300:
                    statement.detail = f"HTTP {response.status_code}"
                    return statement
                body = await read_at_most(response, IDENTITY_BODY_LIMIT)
                if body is None:
                    statement.detail = (f"HTTP {response.status_code}, an answer over "
                                        f"{IDENTITY_BODY_LIMIT // 1024} KiB (not read)")
                    return statement
    except TimeoutError:
        statement.detail = f"timeout: no answer within {timeout:g} s"
        return statement
    except httpx.HTTPError as exc:
        statement.detail = f"no answer: {type(exc).__name__}"
        return statement
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # a deeply nested body is refused like a broken one
        statement.detail = f"HTTP {response.status_code}, not JSON"
        return statement
    if not isinstance(data, dict):
        statement.detail = f"HTTP {response.status_code}, JSON but not an object"
        return statement
    statement.body = data
    statement.detail = f"HTTP {response.status_code}"
    return statement


async def read_statements(client: httpx.AsyncClient, origin: str,
                          timeout: float) -> dict[str, Statement]:
    """The identity GETs (``IDENTITY_PATHS`` at `origin`), together, by path; each bounded by
    `timeout` (at most ``IDENTITY_TIMEOUT_S``)."""
    timeout = min(timeout, IDENTITY_TIMEOUT_S)
    answers = await asyncio.gather(*(_get_json(client, f"{origin}{path}", timeout)
                                     for path in IDENTITY_PATHS))
    return dict(zip(IDENTITY_PATHS, answers, strict=True))


@dataclass
class MetricsStatements:
    """What the server's own /metrics says of it, kept while the /metrics probe parses the
    text (``read`` is the probe's ``read_samples``): never a second request."""

    engines: dict[str, str] = field(default_factory=dict)   # engine → its first metric's name
    model_name: str | None = None
    cache_config: dict[str, str] = field(default_factory=dict)
    gpu_names: dict[str, str] = field(default_factory=dict)  # GPU (index or UUID) → its name

    def read(self, samples: Iterable[tuple[str, dict, float]]) -> None:
        for name, labels, _ in samples:
            for prefix, engine in METRIC_PREFIX_ENGINE.items():
                if name.startswith(prefix):
                    self.engines.setdefault(engine, name)
            if name.startswith("vllm:") and self.model_name is None:
                self.model_name = _text(labels.get("model_name"))
            if name == CACHE_CONFIG_METRIC and not self.cache_config:
                self.cache_config = {key: str(labels[key])[:TEXT_CHARS]
                                     for key in CACHE_CONFIG_LABELS if labels.get(key)}
            gpu_name = _text(labels.get(DCGM_GPU_NAME)) if name.startswith("DCGM_FI_") else None
            if gpu_name and len(self.gpu_names) < GPU_NAMES_KEPT:
                gpu = str(labels.get("gpu") or labels.get("UUID") or len(self.gpu_names))
                self.gpu_names.setdefault(gpu, gpu_name)


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return " ".join(value.split())[:TEXT_CHARS]
    return None


def _whole(value: Any) -> int | None:
    """A positive whole number as stated (a number, or digits in a string as Prometheus labels
    and some servers give them)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def entry_facts(entry: Mapping[str, Any]) -> dict:
    """The part of one /models entry kept for the identity: its scalar fields (texts cut) and
    llama.cpp's ``meta`` scalars."""
    kept: dict[str, Any] = {}
    for key, value in list(entry.items())[:64]:
        if isinstance(value, bool) or isinstance(value, int | float):
            kept[str(key)[:64]] = value
        elif isinstance(value, str):
            kept[str(key)[:64]] = value[:TEXT_CHARS]
    meta = entry.get("meta")
    if isinstance(meta, Mapping):
        kept["meta"] = entry_facts({k: v for k, v in meta.items() if k != "meta"})
    return kept


class _Facts:
    """Each fact from the first source that states it, and which URL that was."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def state(self, key: str, value: Any, url: str) -> None:
        if value is not None and key not in self.values:
            self.values[key] = value
            self.sources[key] = url

    def get(self, key: str) -> Any:
        return self.values.get(key)


def _engine_shape(path: str, body: Mapping[str, Any]) -> str | None:
    """The engine an identity answer's shape belongs to, when it is unmistakable."""
    if path == "/info" and "model_id" in body and ("max_total_tokens" in body
                                                   or body.get("router")):
        return "TGI"
    if path == "/get_server_info" and "version" in body and ("model_path" in body
                                                              or "tp_size" in body):
        return "SGLang"
    if path == "/props" and ("build_info" in body or "default_generation_settings" in body):
        return "llama.cpp"
    return None


def _ftype(value: Any) -> tuple[str | None, str | None]:
    """llama.cpp's file type as (dtype, quantization): "F16" is a dtype, "Q4_K - Medium" a
    quantization."""
    text = _text(value)
    if text is None:
        return None, None
    dtype = FLOAT_FTYPES.get(text.lower())
    return (dtype, None) if dtype else (None, text)


def server_identity(statements: Mapping[str, Statement], models: ModelsListing | None,
                    metrics: MetricsStatements | None = None,
                    metrics_probe: MetricsProbe | None = None) -> dict:
    """report.json's ``server``: engine, engine_version, model {id, root, max_model_len, dtype,
    quantization, parameters}, hardware {device, gpu_names, tensor_parallel_size, kv_cache},
    null where nothing stated it; ``sources`` names the URL behind each fact, ``asked`` each
    identity GET and its outcome."""
    facts = _Facts()
    body = {path: s.body or {} for path, s in statements.items()}
    url = {path: s.url for path, s in statements.items()}
    entry = (models.entry if models is not None else None) or {}
    models_url = models.url if models is not None else ""
    meta: Mapping[str, Any] = entry["meta"] if isinstance(entry.get("meta"), Mapping) else {}
    metrics = metrics or MetricsStatements()
    metrics_url = metrics_probe.url if metrics_probe is not None else ""

    # The engine: its own name in /models first, then its metrics, then an answer's shape.
    facts.state("engine", OWNED_BY_ENGINE.get(str(entry.get("owned_by"))), models_url)
    for engine in metrics.engines:
        facts.state("engine", engine, metrics_url)
    # An answer is read only when its shape is its engine's: /info or /props of some other
    # program says nothing about this one.
    info, sglang, props = ({} if _engine_shape(path, body.get(path, {})) is None
                           else body[path] for path in ("/info", "/get_server_info", "/props"))
    for path in ("/info", "/get_server_info", "/props"):
        facts.state("engine", _engine_shape(path, body.get(path, {})), url.get(path, ""))

    facts.state("engine_version", _text(body.get("/version", {}).get("version")),
                url.get("/version", ""))
    facts.state("engine_version", _text(info.get("version")), url.get("/info", ""))
    facts.state("engine_version", _text(sglang.get("version")), url.get("/get_server_info", ""))
    facts.state("engine_version", _text(props.get("build_info")), url.get("/props", ""))

    facts.state("model.id", _text(entry.get("id")), models_url)
    facts.state("model.id", metrics.model_name, metrics_url)
    facts.state("model.id", _text(info.get("model_id")), url.get("/info", ""))
    facts.state("model.id", _text(sglang.get("served_model_name")),
                url.get("/get_server_info", ""))
    facts.state("model.id", _text(props.get("model_alias")), url.get("/props", ""))

    # What the name serves: the weights' path an engine states beats /models' root, which
    # SGLang fills with the served name again.
    facts.state("model.root", _text(sglang.get("model_path")), url.get("/get_server_info", ""))
    facts.state("model.root", _text(info.get("model_id")), url.get("/info", ""))
    facts.state("model.root", _text(props.get("model_path")), url.get("/props", ""))
    facts.state("model.root", _text(entry.get("root")), models_url)

    settings = props.get("default_generation_settings")
    facts.state("model.max_model_len", _whole(entry.get("max_model_len")), models_url)
    facts.state("model.max_model_len", _whole(meta.get("n_ctx")), models_url)
    facts.state("model.max_model_len",
                _whole(settings.get("n_ctx")) if isinstance(settings, Mapping) else None,
                url.get("/props", ""))
    facts.state("model.max_model_len", _whole(info.get("max_total_tokens")), url.get("/info", ""))
    facts.state("model.max_model_len", _whole(sglang.get("context_length")),
                url.get("/get_server_info", ""))

    dtype, quantization = _ftype(meta.get("ftype"))
    facts.state("model.dtype", dtype, models_url)
    facts.state("model.quantization", quantization, models_url)
    dtype, quantization = _ftype(props.get("model_ftype"))
    facts.state("model.dtype", dtype, url.get("/props", ""))
    facts.state("model.quantization", quantization, url.get("/props", ""))
    facts.state("model.dtype", _text(info.get("model_dtype")), url.get("/info", ""))
    stated_dtype = _text(sglang.get("dtype"))
    facts.state("model.dtype", stated_dtype if stated_dtype != "auto" else None,
                url.get("/get_server_info", ""))
    facts.state("model.quantization", _text(sglang.get("quantization")),
                url.get("/get_server_info", ""))
    facts.state("model.parameters", _whole(meta.get("n_params")), models_url)

    facts.state("hardware.device", _text(sglang.get("device")), url.get("/get_server_info", ""))
    facts.state("hardware.device", _text(info.get("model_device_type")), url.get("/info", ""))
    facts.state("hardware.gpu_names", list(metrics.gpu_names.values()) or None, metrics_url)
    facts.state("hardware.tensor_parallel_size", _whole(sglang.get("tp_size")),
                url.get("/get_server_info", ""))
    facts.state("hardware.kv_cache", dict(metrics.cache_config) or None, metrics_url)

    return {
        "engine": facts.get("engine"),
        "engine_version": facts.get("engine_version"),
        "model": {key: facts.get(f"model.{key}") for key in (
            "id", "root", "max_model_len", "dtype", "quantization", "parameters")},
        "hardware": {key: facts.get(f"hardware.{key}") for key in (
            "device", "gpu_names", "tensor_parallel_size", "kv_cache")},
        "sources": dict(facts.sources),
        "asked": [s.as_dict() for s in statements.values()],
    }
