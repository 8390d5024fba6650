"""The actions agents take, each with the autonomy level it runs at."""

import re

from django.core.validators import RegexValidator
from django.db import models
from simple_history.models import HistoricalRecords

from common.history import history_user
from tenants.models import TenantOwned

ACTION_NAME_RE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
ACTION_NAME_PATTERN = re.compile(ACTION_NAME_RE)


class AutonomyLevel(models.IntegerChoices):
    PROPOSE = 1, "1 · propose only"
    ACT_REVIEWED = 2, "2 · act, then be reviewed"
    AUTONOMOUS = 3, "3 · act alone"


class Action(TenantOwned):
    """An action agents may take, with the autonomy level it runs at.

    The level changes only through an approved ``AutonomyTransition``.
    """

    name = models.CharField(
        max_length=100,
        validators=[RegexValidator(ACTION_NAME_RE, "Action names are lowercase dotted identifiers such as 'email.send'.")],
    )
    description = models.TextField(blank=True)
    autonomy_level = models.PositiveSmallIntegerField(choices=AutonomyLevel.choices, default=AutonomyLevel.PROPOSE)
    auto_registered = models.BooleanField(default=False, help_text="Registered because a proposal named it.")
    last_evaluated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    history = HistoricalRecords(excluded_fields=["last_evaluated_at"], get_user=history_user)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(autonomy_level__gte=1, autonomy_level__lte=3), name="action_level_1_3"),
            models.UniqueConstraint(fields=["tenant", "name"], name="action_name_unique_per_tenant"),
        ]

    def __str__(self):
        return self.name
