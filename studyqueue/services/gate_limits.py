"""The adaptive gate's limit per endpoint (``GateLimit``, named by its normalised URL): one
number every consumer of the endpoint shares, the tokens/s measured at each limit, and the
last good value a restarted consumer starts from."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import IntegrityError, transaction
from django.utils import timezone

from studyqueue.models import GateLimit, fit
from studyqueue.services.endpoints import endpoint_name


def key(endpoint: str) -> str:
    """``endpoint``'s row: its normalised URL (one row per server), cut to the column."""
    return fit(GateLimit, "endpoint", endpoint_name(endpoint))


def load(endpoint: str) -> GateLimit | None:
    """The stored limit of ``endpoint`` (None: no consumer found one yet)."""
    return GateLimit.objects.filter(endpoint=key(endpoint)).first()


def sync(
    endpoint: str,
    *,
    limit: int,
    rates: Mapping[int, float],
    changed_from: int | None = None,
    reason: str = "",
) -> int:
    """Store this consumer's view and return the limit every consumer is to use.

    ``changed_from``: this consumer moved the limit from that value; the move is stored only
    if nobody moved the stored one meanwhile (compare and set): a decision taken at a limit
    that no longer holds is void. The measured tokens/s are merged in either way."""
    endpoint = key(endpoint)
    measured = {str(k): round(v, 2) for k, v in rates.items()}
    limits = GateLimit.objects.all()
    with transaction.atomic(using=limits.db):
        row = limits.select_for_update().filter(endpoint=endpoint).first()
        if row is None:
            try:
                with transaction.atomic(using=limits.db):
                    limits.create(endpoint=endpoint, limit=limit, rates=measured, reason=reason)
                return limit
            except IntegrityError:  # another consumer created it just now
                row = limits.select_for_update().get(endpoint=endpoint)
        fields = ["rates"]
        if changed_from is not None and row.limit == changed_from and limit != row.limit:
            row.limit, row.reason, row.changed_at = limit, reason, timezone.now()
            fields += ["limit", "reason", "changed_at"]
        # Stored rates that are not an object (a hand edit, a bad restore) are unknown.
        kept = row.rates if isinstance(row.rates, dict) else {}
        row.rates = {**kept, **measured}
        row.save(update_fields=fields)
        return row.limit
