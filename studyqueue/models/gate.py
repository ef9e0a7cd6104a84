"""The gate's tables: each LLM server's shared limit and what it measured, and the row
leases of its slots."""

from __future__ import annotations

import math

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from studyqueue.models.base import ENDPOINT_WIDTH, StudyQueueModel


class GateLimit(StudyQueueModel):
    """The adaptive gate's limit for one LLM endpoint (``GATE_PERMITS=auto``): shared by
    every consumer of that endpoint, kept across restarts. Written only through
    ``studyqueue.services.gate_limits``."""

    endpoint = models.CharField(
        _("endpoint"),
        max_length=ENDPOINT_WIDTH,
        unique=True,
        help_text=_(
            "The LLM server's URL, normalised: one row per server however its URL is "
            "written, never with credentials."
        ),
    )
    limit = models.PositiveIntegerField(_("limit"), help_text=_("Concurrent calls allowed now."))
    rates = models.JSONField(
        _("tokens/s by limit"),
        default=dict,
        blank=True,
        help_text=_("Completion tokens/s last measured at each limit, as {limit: tokens/s}."),
    )
    reason = models.CharField(_("reason"), max_length=20, blank=True)
    changed_at = models.DateTimeField(_("changed at"), default=timezone.now)

    class Meta(StudyQueueModel.Meta):
        ordering = ["endpoint"]
        verbose_name = _("gate limit")
        verbose_name_plural = _("gate limits")

    def __str__(self) -> str:
        return f"{self.endpoint}: {self.limit}"

    def measured(self) -> list[tuple[int, float]]:
        """``(limit, tokens/s)`` pairs by limit; hand-edited garbage is left out."""
        if not isinstance(self.rates, dict):
            return []
        pairs = []
        for key, value in self.rates.items():
            try:
                pair = (int(key), float(value))
            except (TypeError, ValueError, OverflowError):
                continue
            if math.isfinite(pair[1]):
                pairs.append(pair)
        return sorted(pairs)


class GateLease(StudyQueueModel):
    """One gate slot of one LLM server, held as a row lease: how every consumer of the server
    shares its limit, on any database and through any pooler. Written only through
    ``services.gate`` (``SlotLeases``), on the database's clock: a slot is taken by the update
    that finds it free or expired, renewed while held, and freed by its holder (a consumer's
    worker id); a dead holder's lease expires."""

    endpoint = models.CharField(_("endpoint"), max_length=ENDPOINT_WIDTH)
    slot = models.PositiveSmallIntegerField(_("slot"))
    holder = models.CharField(
        _("holder"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("The consumer holding it ('': free)."),
    )
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)

    class Meta(StudyQueueModel.Meta):
        ordering = ["endpoint", "slot"]
        verbose_name = _("gate lease")
        verbose_name_plural = _("gate leases")
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "slot"], name="studyqueue_gate_lease_slot")
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} #{self.slot}: {self.holder or '-'}"
