"""The site's Redis cache keeps one redis-py client (common/redis_cache.py): it must still
behave as Django's does when Redis restarts under it and in a forked worker process."""

from __future__ import annotations

import multiprocessing

from common.redis_cache import RedisCache
from tokvera_site import config
from tokvera_site.devservices import EmbeddedRedis


def backend_for(url: str) -> RedisCache:
    return RedisCache(url, {"OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}})


def test_a_redis_cache_url_gives_the_site_s_backend(monkeypatch):
    monkeypatch.setenv("CACHE_URL", "redis://127.0.0.1:6399/3")
    assert config.cache()["BACKEND"] == "common.redis_cache.RedisCache"
    monkeypatch.setenv("CACHE_URL", "dbcache://tokvera_cache")
    assert config.cache()["BACKEND"] == "django.core.cache.backends.db.DatabaseCache"


def test_key_prefix_and_timeout_in_the_cache_url_are_obeyed(monkeypatch):
    """Two sites sharing one Redis database by `?key_prefix=` must not read each other's keys,
    and `?timeout=` sets the default lifetime (django-environ hands both to Django's Redis
    backend in lower case, where they were silently ignored)."""
    with EmbeddedRedis() as redis_server:
        caches = {}
        for site in ("site-a", "site-b"):
            monkeypatch.setenv("CACHE_URL", f"{redis_server.url(0)}?key_prefix={site}&timeout=50")
            settings = config.cache()
            caches[site] = RedisCache(settings["LOCATION"], settings)
        caches["site-a"].set("benchmarks", "a's copy")
        assert caches["site-b"].get("benchmarks") is None
        caches["site-b"].set("benchmarks", "b's copy")
        assert caches["site-a"].get("benchmarks") == "a's copy"
        raw = caches["site-a"]._cache.get_client(write=False)
        assert sorted(key.decode().split(":")[0] for key in raw.keys("*")) == ["site-a", "site-b"]
        assert 0 < raw.ttl(next(iter(raw.keys("site-a:*")))) <= 50


def test_the_cache_keeps_working_when_redis_restarts_under_it():
    with EmbeddedRedis() as redis_server:
        cache = backend_for(redis_server.url(0))
        assert cache.add("pending", 1, timeout=60) is True
        assert cache.add("pending", 1, timeout=60) is False  # the mark is there
        redis_server.stop()  # everything it held is gone, its connections with it
        redis_server.start()
        assert cache.get("pending") is None
        assert cache.add("pending", 2, timeout=60) is True
        assert cache.get("pending") == 2


def _child_reads(cache: RedisCache, results) -> None:
    results.put((cache.get("from-parent"), cache.add("from-child", 1, timeout=60)))


def test_a_forked_process_uses_the_kept_client_safely():
    """Celery's prefork workers and gunicorn's workers fork a process that may already have
    used the cache: the child gets connections of its own, never the parent's socket."""
    with EmbeddedRedis() as redis_server:
        cache = backend_for(redis_server.url(0))
        cache.set("from-parent", "hello", timeout=60)
        fork = multiprocessing.get_context("fork")  # the child inherits the backend as it is
        results = fork.Queue()
        child = fork.Process(target=_child_reads, args=(cache, results))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert results.get(timeout=5) == ("hello", True)
        assert cache.get("from-child") == 1  # and the parent's client still works

