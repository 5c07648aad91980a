"""A scan's base URL, load and down/degraded causes as columns (scans/models/scans.py, Scan), so that
lists, charts and states read no report; new scans get them as they are stored
(scans/running/worker.py, report_columns). This fills them for the scans stored before: each report
is read once (one jsonb_each over it keeps only the parts needed), BATCH scans per
transaction, so a big table is neither locked nor rewritten in one go. Run again, it only
rewrites the same values.

The SQL is a copy, frozen here: the load is what scans.history.rollups' _plan_sql reads, the text
PostgreSQL's ->> gives."""

from django.db import migrations, models

BATCH = 500

PLAN_PATHS = {  # scans.endpoints.profile.PLAN_PATHS as of this migration
    "levels": ("levels",),
    "requests": ("requests_per_level",),
    "max_tokens": ("max_tokens",),
    "warmup": ("workload", "warmup"),
    "input_tokens": ("workload", "input_tokens"),
    "output_tokens": ("workload", "output_tokens"),
    "shared_prefix_tokens": ("workload", "shared_prefix_tokens"),
    "dataset_name": ("workload", "dataset", "name"),
    "dataset_lines": ("workload", "dataset", "lines"),
    "dataset_sha256": ("workload", "dataset", "sha256"),
}

_PLAN = "jsonb_build_object({})".format(", ".join(
    f"'pf_{name}', p.rep #>> '{{plan,{','.join(path)}}}'" for name, path in PLAN_PATHS.items()))

FILL = f"""
UPDATE scans_scan AS s SET
    load_plan = {_PLAN},
    target_url = LEFT(COALESCE(p.rep #>> '{{target,base_url}}', ''), 500),
    preflight_stopped = COALESCE(p.rep #>> '{{preflight,stopped}}' = 'true', false),
    preflight_cause = COALESCE(p.rep #>> '{{preflight,cause}}', ''),
    failure_summary = COALESCE(p.rep #>> '{{failure_summary,sentence}}', ''),
    preflight_warnings = p.rep #> '{{preflight,warnings}}'
FROM (
    SELECT r.id, (SELECT COALESCE(jsonb_object_agg(k, v), '{{}}'::jsonb)
                  FROM jsonb_each(r.report) AS e(k, v)
                  WHERE k IN ('plan', 'target', 'preflight', 'failure_summary')) AS rep
    FROM scans_scan AS r
    WHERE r.id = ANY(%s) AND jsonb_typeof(r.report) = 'object'
) AS p
WHERE s.id = p.id
"""  # noqa: S608 - only the constant PLAN_PATHS is formatted in; ids are parameters


def fill(apps, schema_editor):
    connection = schema_editor.connection
    last = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM scans_scan WHERE report IS NOT NULL AND id > %s "
                           "ORDER BY id LIMIT %s", [last, BATCH])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return
            cursor.execute(FILL, [ids])
        last = ids[-1]


class Migration(migrations.Migration):
    # Each batch commits on its own (a long backfill holds no lock on the whole table).
    atomic = False

    dependencies = [
        ("scans", "0022_h34e_pushed_proof_turns"),
    ]

    operations = [
        migrations.AddField(model_name="scan", name="target_url",
                            field=models.CharField(blank=True, default="", max_length=500)),
        migrations.AddField(model_name="scan", name="load_plan",
                            field=models.JSONField(blank=True, null=True)),
        migrations.AddField(model_name="scan", name="preflight_stopped",
                            field=models.BooleanField(default=False)),
        migrations.AddField(model_name="scan", name="preflight_cause",
                            field=models.TextField(blank=True, default="")),
        migrations.AddField(model_name="scan", name="failure_summary",
                            field=models.TextField(blank=True, default="")),
        migrations.AddField(model_name="scan", name="preflight_warnings",
                            field=models.JSONField(blank=True, null=True)),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
