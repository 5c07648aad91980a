from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Network and public benchmarks"
