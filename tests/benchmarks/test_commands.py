"""`manage.py createhost` and `manage.py catalog add|list`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.models import AuditEntry, CatalogModel, Host
from tests.helpers.network import make_catalog


def _call(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_createhost_prints_the_token_once_on_one_line(net):
    out = _call("createhost", "box-1", "--team", "hostops", "--trust", "software")
    assert out.count("\n") == 1 and out.startswith("tkh_")
    token = out.strip()
    host = Host.dangerously_unscoped.get(name="box-1")
    assert host.team == net.operator and host.trust_level == "software"
    assert host.token_prefix == token[:12] and token not in host.token_hmac
    assert net.heartbeat(token, ["tiny-q4"]).status_code == 200
    entry = AuditEntry.objects.get(action="create", target_type="host")
    assert entry.actor_label == "command createhost"


def test_createhost_refuses_hardware_trust_and_unknown_teams(net):
    with pytest.raises(CommandError):
        call_command("createhost", "box", "--team", "hostops", "--trust", "hardware")
    with pytest.raises(CommandError, match="No team"):
        call_command("createhost", "box", "--team", "nobody")
    assert not Host.dangerously_unscoped.exists()


def test_catalog_add_creates_a_model_and_audits_it(db):
    assert _call("catalog", "add", "gemma-3-270m-q4", "--quant", "Q4_K_M", "--context-len", "32768",
                 "--name", "Gemma 3 270M") == "added gemma-3-270m-q4\n"
    row = CatalogModel.objects.get(pk="gemma-3-270m-q4")
    assert (row.display_name, row.quant, row.context_len, row.active) == (
        "Gemma 3 270M", "Q4_K_M", 32768, True)
    assert AuditEntry.objects.get(target_id="gemma-3-270m-q4").actor_label == "command catalog add"


def test_catalog_add_refuses_duplicates_and_bad_ids(db):
    make_catalog("tiny-q4")
    with pytest.raises(CommandError, match="already exists"):
        call_command("catalog", "add", "tiny-q4", "--quant", "Q4", "--context-len", "10")
    with pytest.raises(CommandError):
        call_command("catalog", "add", "not a slug", "--quant", "Q4", "--context-len", "10")
    with pytest.raises(CommandError):
        call_command("catalog", "add", "zero-ctx", "--quant", "Q4", "--context-len", "0")
    assert list(CatalogModel.objects.values_list("id", flat=True)) == ["tiny-q4"]


def test_catalog_list_shows_each_model_with_its_online_hosts(net):
    make_catalog("idle-q8", active=False)
    net.host("h1")
    net.host("h2")
    lines = _call("catalog", "list").splitlines()
    assert lines[0].split() == ["ID", "NAME", "QUANT", "CONTEXT", "ACTIVE", "ONLINE", "HOSTS"]
    assert lines[1].split() == ["idle-q8", "Idle-Q8", "Q4_K_M", "4096", "no", "0"]
    assert lines[2].split() == ["tiny-q4", "Tiny-Q4", "Q4_K_M", "4096", "yes", "2"]


def test_catalog_list_of_an_empty_catalog_says_so(db):
    assert _call("catalog", "list") == "(no catalog models)\n"


def test_catalog_ids_may_carry_dots_as_model_versions_do(db):
    assert _call("catalog", "add", "qwen2.5-0.5b-q8", "--quant", "Q8_0",
                 "--context-len", "32768") == "added qwen2.5-0.5b-q8\n"
    assert CatalogModel.objects.filter(pk="qwen2.5-0.5b-q8").exists()


def test_a_refused_catalog_id_says_which_characters_are_allowed(db):
    for bad in ("qwen2.5/evil", ".hidden", "trailing-", "two words"):
        with pytest.raises(CommandError, match="letters, digits, dots, hyphens"):
            call_command("catalog", "add", bad, "--quant", "Q4", "--context-len", "10")
    assert not CatalogModel.objects.exists()


def test_a_dotted_catalog_id_works_through_heartbeat_and_job_submission(net):
    call_command("catalog", "add", "qwen2.5-0.5b-q8", "--quant", "Q8_0", "--context-len", "4096",
                 stdout=StringIO())
    host, token = net.host("h1", models=("qwen2.5-0.5b-q8",))

    assert net.heartbeat(token, ["qwen2.5-0.5b-q8"]).status_code == 200
    assert Host.dangerously_unscoped.online_for("qwen2.5-0.5b-q8").filter(pk=host.pk).exists()
    job_id = net.submit_id(model="qwen2.5-0.5b-q8")
    assert net.job(job_id).model_id == "qwen2.5-0.5b-q8"
