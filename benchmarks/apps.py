from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save, pre_delete


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Network and public benchmarks"
    # Collected by common.periodic_tasks (name shown in the admin, task, every N s).
    periodic_tasks = (
        # Lease expiry, queue deadline and an assignment pass, even when no host calls in.
        ("Network: expire leases and assign jobs", "benchmarks.tasks.network_tick", 5),
        # Folds whatever a lost fold task left behind (each completion queues its own fold).
        ("Network: fold EWMAs left behind", "benchmarks.tasks.sweep_unfolded", 30),
        # Rebuilt a little before the cached snapshot (300 s) lapses (benchmarks/public/cache.py).
        ("Public benchmarks: rebuild the snapshot", "benchmarks.tasks.refresh_public_benchmarks", 240),
    )

    def ready(self):
        from benchmarks.models import CatalogModel
        from benchmarks.network.catalog import forget_advertised, forget_catalog_ids

        post_save.connect(forget_catalog_ids, sender=CatalogModel,
                          dispatch_uid="benchmarks-catalog-saved")
        post_delete.connect(forget_catalog_ids, sender=CatalogModel,
                            dispatch_uid="benchmarks-catalog-deleted")
        pre_delete.connect(forget_advertised, sender=CatalogModel,
                           dispatch_uid="benchmarks-catalog-deleting")
