"""The catalog of models the network serves: adding an entry, and the set of ids heartbeats are
checked against (cached briefly, kept right by the signals in benchmarks/apps.py)."""

from __future__ import annotations

from django.core.cache import cache
from django.db import transaction

from benchmarks.models import CatalogModel
from benchmarks.network import audit
from benchmarks.network.system_wide import ALL_HOSTS
from common.cache_outage import CACHE_ERRORS, warn

_CATALOG_IDS_KEY = "benchmarks:catalog-ids"


class CatalogError(ValueError):
    pass


def catalog_ids() -> frozenset[str]:
    """Every catalog id (active or not), cached briefly: heartbeats check against it."""
    try:
        ids = cache.get(_CATALOG_IDS_KEY)
    except CACHE_ERRORS as exc:  # heartbeats keep working without the cache
        warn("catalog ids read from the database", exc)
        return frozenset(CatalogModel.objects.values_list("id", flat=True))
    if ids is None:
        ids = frozenset(CatalogModel.objects.values_list("id", flat=True))
        try:
            cache.set(_CATALOG_IDS_KEY, ids, timeout=30)
        except CACHE_ERRORS as exc:
            warn("catalog ids not cached", exc)
    return ids


def forget_catalog_ids(**_kwargs) -> None:
    cache.delete(_CATALOG_IDS_KEY)


@transaction.atomic
def add_catalog_model(model_id: str, quant: str, context_len: int, display_name: str = "",
                      active: bool = True, actor=None) -> CatalogModel:
    if CatalogModel.objects.filter(pk=model_id).exists():
        raise CatalogError(f"catalog id {model_id!r} already exists")
    row = CatalogModel(id=model_id, display_name=display_name or model_id, quant=quant,
                       context_len=context_len, active=active)
    row.full_clean()
    row.save()
    audit.record(actor, row, "create", {
        "quant": [None, quant], "context_len": [None, context_len], "active": [None, active]})
    return row


def forget_advertised(sender, instance, **_kwargs) -> None:
    """A catalog model is being deleted: its hosts' next heartbeat must rewrite their model
    links (record_heartbeat only rewrites a list that changed), or a model re-created with the
    same id would never see those hosts again."""
    ALL_HOSTS.filter(catalog_models=instance).update(advertised=[])
