"""Consumers as they last reported themselves: what each writes with and whether it still
runs. An operator may remove a stopped or silent one; a live one is kept (it would write its
record again at its next report)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from studyqueue.admin.common import GuardedInputAdmin, NoAddOrChange, badge
from studyqueue.conf import AUTO
from studyqueue.models import QueueConsumer
from studyqueue.queue.presence import Liveness, gate_url, reported_endpoints, state_of
from studyqueue.services import gate_limits

STATE_COLOURS = {Liveness.LIVE: "#16a34a", Liveness.SILENT: "#d97706", Liveness.STOPPED: "#64748b"}


@admin.register(QueueConsumer)
class QueueConsumerAdmin(NoAddOrChange, GuardedInputAdmin):
    """A consumer writes its own record: nobody adds or changes one here; a stopped one's
    record may be deleted with Django's delete permission."""

    list_display = (
        "worker_id", "liveness", "started_at", "seen_at", "model_shown", "prompt_label", "gate",
        "servers",
    )  # fmt: skip
    search_fields = ("worker_id", "host", "prompt_version")
    actions = ("remove_gone",)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Whoever sees the dashboard (which lists the consumers) sees them here too.
        return super().has_view_permission(request, obj) or request.user.has_perm(
            "studyqueue.view_studyquestionjob"
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and state_of(obj, timezone.now()).live:
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # Django 6.1 passes where the actions show (action_location); Django 5.2 does not.
        actions = super().get_actions(request, *args, **kwargs)
        actions.pop("delete_selected", None)  # remove_gone keeps the live ones
        return actions

    @admin.display(description=_("state"))
    def liveness(self, record: QueueConsumer) -> str:
        state = state_of(record, timezone.now()).state
        return badge(str(state.label), STATE_COLOURS[state])

    @admin.display(description=_("model"), ordering="model")
    def model_shown(self, record: QueueConsumer) -> str:
        return record.model or gettext("server default")

    @admin.display(description=_("LLM servers"))
    def servers(self, record: QueueConsumer) -> str:
        """Each server as it found it at its last report, else the record's URL (an old one)."""
        reported = reported_endpoints(record)
        if not reported:
            return record.llm_url
        states = {"up": gettext("up"), "probing": gettext("probing"), "down": gettext("down")}
        return format_html_join(
            mark_safe("<br>"),
            '<span data-endpoint="{}" data-state="{}">{}: {}</span>',
            (
                (e["name"], e.get("state", ""), e["name"], states.get(str(e.get("state")), "?"))
                for e in reported
            ),
        )

    @admin.display(description=_("gate"))
    def gate(self, record: QueueConsumer) -> str:
        # An auto gate follows its server's stored limit, which moves between the
        # consumer's reports: read it, as the dashboard does (a query per auto row; a day's
        # consumers are few).
        shared = gate_limits.load(gate_url(record)) if record.gate_permits == AUTO else None
        limit = shared.limit if shared is not None else record.gate_limit
        if limit is None or str(limit) == record.gate_permits:
            return record.gate_permits or "-"
        shown = {"permits": record.gate_permits or "-", "limit": limit}
        return gettext("%(permits)s: limit %(limit)s") % shown

    @admin.action(
        permissions=["delete"], description=_("Remove the selected stopped or silent consumers")
    )
    def remove_gone(self, request: HttpRequest, queryset: QuerySet) -> None:
        now = timezone.now()
        records = list(queryset)
        gone = queryset.filter(pk__in=[r.pk for r in records if not state_of(r, now).live])
        self.log_deletions(request, gone)
        removed, _ = gone.delete()
        kept = len(records) - removed
        self.message_user(
            request,
            ngettext("Removed %(count)s consumer.", "Removed %(count)s consumers.", removed)
            % {"count": removed},
            messages.SUCCESS,
        )
        if kept:
            self.message_user(
                request,
                ngettext(
                    "Kept %(count)s live consumer: it is running.",
                    "Kept %(count)s live consumers: they are running.",
                    kept,
                )
                % {"count": kept},
                messages.WARNING,
            )
