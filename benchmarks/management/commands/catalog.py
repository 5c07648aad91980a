from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from benchmarks.models import CatalogModel
from benchmarks.network import catalog
from benchmarks.network.system_wide import ALL_HOSTS


class Command(BaseCommand):
    help = "Manage the network's model catalog: `catalog add ID --quant Q --context-len N`, `catalog list`."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = sub.add_parser("add", help="add a catalog model")
        add.add_argument("id", help="catalog id: letters, digits, dots, hyphens, underscores, "
                                           "e.g. qwen2.5-0.5b-q8")
        add.add_argument("--quant", required=True, help="quantization, e.g. Q4_K_M")
        add.add_argument("--context-len", required=True, type=int, dest="context_len")
        add.add_argument("--name", default="", help="display name (default: the id)")
        add.add_argument("--inactive", action="store_true", help="add it without accepting jobs")
        sub.add_parser("list", help="list catalog models with their online hosts")

    def handle(self, action, **options):
        if action == "add":
            try:
                row = catalog.add_catalog_model(
                    options["id"], options["quant"], options["context_len"], options["name"],
                    active=not options["inactive"], actor="command catalog add",
                )
            except catalog.CatalogError as exc:
                raise CommandError(str(exc)) from exc
            except ValidationError as exc:  # full_clean: a bad id, a bad context length
                problems = "; ".join(f"{field}: {' '.join(errors)}"
                                     for field, errors in exc.message_dict.items())
                raise CommandError(f"invalid catalog model: {problems}") from exc
            self.stdout.write(f"added {row.id}")
            return
        rows = list(CatalogModel.objects.all())
        if not rows:
            self.stdout.write("(no catalog models)")
            return
        header = ("ID", "NAME", "QUANT", "CONTEXT", "ACTIVE", "ONLINE HOSTS")
        table = [header] + [
            (r.id, r.display_name, r.quant, str(r.context_len), "yes" if r.active else "no",
             str(ALL_HOSTS.online_for(r.id).count()))  # every operator's hosts
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for line in table:
            self.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
