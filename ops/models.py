from django.db import models
from django.utils import timezone


class WorkerHeartbeat(models.Model):
    """One row per running worker (`manage.py worker`), rewritten after each of its passes:
    `/readyz` and `/metrics` read the freshest. A stopped worker's row is deleted on its way
    out; a killed one's is left to age (and deleted by the next worker a day later)."""

    worker = models.CharField(max_length=200, unique=True)  # host:pid
    started_at = models.DateTimeField(default=timezone.now)
    last_pass_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self):
        return f"{self.worker} at {self.last_pass_at:%Y-%m-%d %H:%M:%S}"
