"""What running scans hold on to: pushed reports waiting for their proof, each team's turn at
the proof workers, and the per-origin scan locks."""

from __future__ import annotations

from django.db import models

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.models.scans import Scan


class PushedReportBody(TeamOwned):
    """The bytes of a pushed report waiting for its proof: the upload stores them with a queued
    pushed scan and answers 202; the proof worker (queue "proofs") reads, proves and deletes
    them (scans/running/pushes.py)."""

    # no constraint in the database: scans are partitioned (scans/models/scans.py)
    scan = models.OneToOneField(Scan, on_delete=models.CASCADE, primary_key=True,
                                related_name="pushed_body", db_constraint=False)
    body = models.BinaryField()

    team_lookup = "scan__endpoint__team"

    class Meta(TeamOwned.Meta):
        pass

    def __str__(self) -> str:
        return f"pushed report of scan {self.scan_id}"


class ProofTurn(TeamOwned):
    """When a team's last pushed-report proof started: the proof workers serve the team whose
    last proof started longest ago first (scans/running/pushes.py, claim_turn), and write this in the
    transaction that claims the report."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, primary_key=True,
                                related_name="+")
    last_started_at = models.DateTimeField()

    class Meta(TeamOwned.Meta):
        pass

    def __str__(self) -> str:
        return f"last proof of team {self.team_id} at {self.last_started_at}"


class OriginLock(models.Model):
    """At most one running scan per target origin (scheme://host:port), across all workers.

    A row is the lock: inserting it is atomic on every database, and a lock whose holder died
    is taken over once it expires."""

    origin = models.CharField(max_length=300, unique=True)
    scan_id = models.BigIntegerField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.origin} held by scan {self.scan_id}"
