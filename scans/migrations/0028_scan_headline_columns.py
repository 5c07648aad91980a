"""A scan's headline figures (first level: TTFT p50/p95, generation rate and its basis,
first-answer and thinking time), the ids of its score's caps, its capacity section and each
check's reason as columns (scans/models/scans.py), so that pages, charts and the metrics read
no report; new scans get them as they are stored (scans/running/worker.py, report_columns).
This fills them for the scans stored before, each report read once in SQL, BATCH scans per
transaction (no lock on the whole table), and marks each row with report_columns_version 2.
Run again, it only rewrites the same values.

The SQL is a copy, frozen here (a migration must do the same whatever later code says): the
load is what scans.endpoints.profile.PLAN_PATHS named when this was written."""

from django.db import migrations, models

BATCH = 500
VERSION = 2

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


def _number(path):
    return (f"CASE WHEN jsonb_typeof(p.rep #> '{{{path}}}') = 'number' "
            f"THEN (p.rep #>> '{{{path}}}')::float END")


FILL = f"""
UPDATE scans_scan AS s SET
    load_plan = {_PLAN},
    target_url = LEFT(COALESCE(p.rep #>> '{{target,base_url}}', ''), 500),
    preflight_stopped = COALESCE(p.rep #>> '{{preflight,stopped}}' = 'true', false),
    preflight_cause = COALESCE(p.rep #>> '{{preflight,cause}}', ''),
    failure_summary = COALESCE(p.rep #>> '{{failure_summary,sentence}}', ''),
    preflight_warnings = p.rep #> '{{preflight,warnings}}',
    ttft_p50_ms = {_number('levels,0,ttft_ms,p50')},
    ttft_p95_ms = {_number('levels,0,ttft_ms,p95')},
    tokens_per_s = {_number('levels,0,generation_rate,median')},
    tokens_basis = CASE WHEN jsonb_typeof(p.rep #> '{{levels,0,generation_rate,basis}}') = 'string'
                   THEN LEFT(p.rep #>> '{{levels,0,generation_rate,basis}}', 12) ELSE '' END,
    first_answer_p50_ms = {_number('levels,0,time_to_first_answer_ms,p50')},
    thinking_p50_ms = {_number('levels,0,thinking_ms,p50')},
    caps_applied = CASE WHEN jsonb_typeof(p.rep #> '{{score,caps_applied}}') = 'array' THEN
        COALESCE((SELECT jsonb_agg(COALESCE(c ->> 'id', ''))
                  FROM jsonb_array_elements(p.rep #> '{{score,caps_applied}}') AS c
                  WHERE jsonb_typeof(c) = 'object'), '[]'::jsonb)
        ELSE '[]'::jsonb END,
    capacity_found = CASE WHEN jsonb_typeof(p.rep -> 'capacity') = 'object'
                     THEN p.rep -> 'capacity' END,
    report_columns_version = {VERSION}
FROM (
    SELECT r.id, (SELECT COALESCE(jsonb_object_agg(k, v), '{{}}'::jsonb)
                  FROM jsonb_each(r.report) AS e(k, v)
                  WHERE k IN ('plan', 'target', 'preflight', 'failure_summary', 'levels',
                              'score', 'capacity')) AS rep
    FROM scans_scan AS r
    WHERE r.id = ANY(%s) AND jsonb_typeof(r.report) = 'object'
) AS p
WHERE s.id = p.id
"""  # noqa: S608 - only constant paths are formatted in; ids are parameters

REASONS = """
UPDATE scans_checkresult AS c SET reason = x.reason
FROM (
    SELECT r.id AS scan_id, e ->> 'id' AS check_id, e ->> 'reason' AS reason
    FROM scans_scan AS r, jsonb_array_elements(
        CASE WHEN jsonb_typeof(r.report -> 'checks') = 'array' THEN r.report -> 'checks'
             ELSE '[]'::jsonb END) AS e
    WHERE r.id = ANY(%s) AND jsonb_typeof(e -> 'reason') = 'string'
) AS x
WHERE c.scan_id = x.scan_id AND c.check_id = x.check_id
"""


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
            cursor.execute(REASONS, [ids])
        last = ids[-1]




class Migration(migrations.Migration):
    # Each batch commits on its own (a long backfill holds no lock on the whole table).
    atomic = False


    dependencies = [
        ('scans', '0027_apprise_channel_kind'),
    ]

    operations = [
        migrations.AddField(
            model_name='checkresult',
            name='reason',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.AddField(
            model_name='scan',
            name='capacity_found',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='caps_applied',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='first_answer_p50_ms',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='report_columns_version',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='scan',
            name='thinking_p50_ms',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='tokens_basis',
            field=models.CharField(blank=True, default='', max_length=12),
        ),
        migrations.AddField(
            model_name='scan',
            name='tokens_per_s',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='ttft_p50_ms',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='scan',
            name='ttft_p95_ms',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
