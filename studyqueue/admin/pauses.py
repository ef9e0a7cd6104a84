"""Pausing and resuming the queue from the admin: adding a pause pauses, deleting resumes
(``studyqueue.pause_queue``, through the functions the commands call; logged)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue.admin.common import GuardedInputAdmin
from studyqueue.models import QueuePause
from studyqueue.queue import pauses


@admin.register(QueuePause)
class QueuePauseAdmin(GuardedInputAdmin):
    list_display = ("scope", "reason", "paused_by", "paused_at")
    fields = ("kind", "reason", "paused_by", "paused_at")
    readonly_fields = ("paused_by", "paused_at")
    actions = ("resume_selected",)

    @admin.display(description=_("paused"), ordering="kind")
    def scope(self, pause: QueuePause) -> str:
        return pause.get_kind_display() if pause.kind else gettext("every kind")

    def _may_pause(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.pause_queue")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_pause(request) or request.user.has_perm("studyqueue.view_studyquestionjob")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may_pause(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a pause is added (pause) or removed (resume), never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_pause(request)

    def save_model(self, request: HttpRequest, obj: QueuePause, form: Any, change: bool) -> None:
        row, _created = pauses.pause(obj.kind, reason=obj.reason, by=request.user.get_username())
        obj.pk, obj.paused_by, obj.paused_at = row.pk, row.paused_by, row.paused_at

    def delete_model(self, request: HttpRequest, obj: QueuePause) -> None:
        pauses.resume(obj.kind)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for kind in queryset.values_list("kind", flat=True):
            pauses.resume(kind)

    @admin.action(permissions=["delete"], description=_("Resume: lift the selected pauses"))
    def resume_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self.log_deletions(request, queryset)
        kinds = [self.scope(pause) for pause in queryset]
        self.delete_queryset(request, queryset)
        resumed = gettext("Resumed for %(kinds)s.") % {"kinds": ", ".join(kinds)}
        self.message_user(request, resumed, messages.SUCCESS)
