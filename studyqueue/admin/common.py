"""What the admin pages share: badges, excerpts, capped long texts, a capped paginator."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from studyqueue.conf import conf
from studyqueue.models import (
    MAX_ID,
    ExplanationRevision,
    JobQuerySet,
    JobStatus,
    Outcome,
    StudyQuestion,
    unstorable,
)
from studyqueue.queue.operations import id_ranges

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


def completion_tokens(reply: ExplanationRevision | None) -> str:
    """A reply's completion tokens, marked when counted from its stream ("-": unknown)."""
    if reply is None or reply.completion_tokens is None:
        return "-"
    count = reply.completion_tokens
    return gettext("%(count)s (counted)") % {"count": count} if reply.tokens_counted else str(count)


# Badge colours per status; a test checks that every status has one.
STATUS_COLOURS: dict[str, str] = {
    JobStatus.PENDING: "#64748b",
    JobStatus.PROCESSING: "#2563eb",
    JobStatus.COMPLETED: "#16a34a",
    JobStatus.FAILED: "#dc2626",
    JobStatus.SKIPPED: "#d97706",
}

# Badge colours per attempt outcome ("" is an attempt still running); a test checks them all.
ATTEMPT_COLOURS: dict[str, str] = {
    "": STATUS_COLOURS[JobStatus.PROCESSING],
    Outcome.COMPLETED: STATUS_COLOURS[JobStatus.COMPLETED],
    Outcome.RETRYING: "#ca8a04",
    Outcome.FAILED: STATUS_COLOURS[JobStatus.FAILED],
    Outcome.RELEASED: STATUS_COLOURS[JobStatus.PENDING],
    Outcome.SKIPPED: STATUS_COLOURS[JobStatus.SKIPPED],
    Outcome.STALE: "#9a3412",
}

EXCERPT = 60
# A question's columns a list never reads whole (it shows an excerpt of the text).
LONG_COLUMNS = ("text", "explanation", "choices", "answer")
# A long text shows this much in a scroll box; the rest is behind a link. A reply may be
# megabytes (up to LLM_MAX_REPLY_BYTES): a page never renders it whole.
LONG_TEXT_SHOWN = 20_000
# An admin action changes at most this many rows (set-based, in OPERATOR_BATCH statements:
# ~1 s for 35,000 jobs, far inside the web timeout); above it, it refuses and names the
# command that does it. Up to LOG_EACH rows get an admin log entry each; more get one
# entry that lists their ids as ranges (35,000 entries would cost more than the change).
ACTION_LIMIT = 50_000
LOG_EACH = 100


def excerpt(text: str, length: int = EXCERPT) -> str:
    text = " ".join(text[: length * 4].split())
    return text if len(text) <= length else text[: length - 1] + "…"


def long_text(text: str, full_text_url: str | None = None) -> str:
    """``text`` in a scroll box, capped at ``LONG_TEXT_SHOWN`` characters (escaped)."""
    if not text:
        return "-"
    shown = text[:LONG_TEXT_SHOWN]
    box = format_html(
        '<div class="sq-long" style="max-height:24em;max-width:60em;overflow:auto;'
        'white-space:pre-wrap">{}</div>',
        shown,
    )
    more = len(text) - len(shown)
    if more and full_text_url:
        box += format_html(
            '<p>{} <a href="{}">{}</a>.</p>',
            gettext("%(count)s more characters not shown:")
            % {"count": number_format(more, force_grouping=True)},
            full_text_url,
            gettext("the full text"),
        )
    return box


def explanation_box(question: StudyQuestion | None) -> str:
    """A question's explanation in a scroll box, the whole text behind a link; "-" for none."""
    if question is None or question.pk is None:
        return "-"
    url = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
    return long_text(question.explanation, url)


def change_link(model_name: str, pk: int | None) -> str:
    """``#pk`` linked to its admin page (``model_name`` as in the URL names); "-" for none."""
    if pk is None:
        return "-"
    url = reverse(f"admin:studyqueue_{model_name}_change", args=[pk])
    return format_html('<a href="{}">#{}</a>', url, pk)


def column(
    description: StrOrPromise, show: Callable[[Any], object], field: str = "", **options: Any
) -> Callable[[Any, Any], object]:
    """A read-only column of an admin (``admin.display``): ``show(obj.<field>)``, or
    ``show(obj)`` with no ``field``; ``options`` as ``admin.display`` takes them."""

    @admin.display(description=description, **options)
    def shown(model_admin: Any, obj: Any) -> object:
        return show(getattr(obj, field) if field else obj)

    return shown


def link_column(
    description: StrOrPromise, model_name: str, field: str
) -> Callable[[Any, Any], object]:
    """A column of ``obj.<field>``, an id, linked to its admin page (``change_link``)."""
    return column(description, lambda pk: change_link(model_name, pk), field)


def badge(text: str, colour: str, title: str = "") -> SafeString:
    """A coloured label that never wraps; styled inline, so it looks the same on every page."""
    return format_html(
        '<span class="sq-badge" style="background:{};color:#fff;padding:2px 8px;'
        'border-radius:10px;font-size:11px;font-weight:600;white-space:nowrap"{}>{}</span>',
        colour,
        format_html(' title="{}"', title) if title else "",
        text,
    )


def status_badge(status: str) -> SafeString:
    """A job status as a coloured label."""
    label = JobStatus(status).label if status in JobStatus.values else status
    return badge(str(label), STATUS_COLOURS.get(status, "#6b7280"))


class CappedCountPaginator(Paginator):
    """Counts at most ``CAP`` rows, so a page view never counts a huge table."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if isinstance(qs, QuerySet):
            return qs.order_by().values("pk")[: self.CAP].count()
        return len(qs)

    @property
    def capped(self) -> bool:
        return self.count >= self.CAP


def stale_cutoff(now: datetime) -> datetime:
    """A processing job whose last heartbeat is older than this is stale."""
    return now - timedelta(minutes=conf.STALE_MINUTES)


class StaleFilter(admin.SimpleListFilter):
    """Processing jobs whose heartbeat is older than the stale threshold."""

    title = _("stale")
    parameter_name = "stale"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        minutes = f"{conf.STALE_MINUTES:g}"
        return [("yes", gettext("No heartbeat for %(minutes)s min") % {"minutes": minutes})]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "yes":
            jobs = cast(JobQuerySet, queryset)  # the jobs' own QuerySet
            return jobs.stale(stale_cutoff(timezone.now()))
        return None


class NoAddOrChange:
    """An admin (or inline) whose rows nobody adds or changes here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnly(NoAddOrChange):
    """An admin (or inline) whose rows nobody adds, changes or deletes here. An inline of it
    has no empty forms to add a row: without the add permission, Django sets its ``max_num``
    to 0 (``ModelAdmin.get_inline_instances``)."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PageAdmin(ReadOnly, admin.ModelAdmin):
    """A page of its own behind a proxy model, for active staff with ``permission``."""

    permission = ""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and user.has_perm(self.permission))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        """What every such page's template needs: the admin's own context, a title, the opts."""
        return {**self.admin_site.each_context(request), "title": title, "opts": self.model._meta}


class GuardedInputAdmin(admin.ModelAdmin):
    """A NUL in a filter or the search, or a selected id that is not an id, ends as the admin's
    "invalid parameters" page or a message, never as a database error."""

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        if any(unstorable(value) for _, values in request.GET.lists() for value in values):
            raise IncorrectLookupParameters  # the admin redirects to ?e=1
        return super().get_changelist_instance(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        if request.method == "POST" and not self._valid_selection(request):
            self.message_user(
                request,
                gettext("The selection holds something that is not an id; nothing was changed."),
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)

    def _valid_selection(self, request: HttpRequest) -> bool:
        for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
            try:
                pk = self.opts.pk.to_python(value)
            except ValidationError:
                return False
            if isinstance(pk, int) and not 0 <= pk <= MAX_ID:
                return False
        return True

    def action_ids(
        self, request: HttpRequest, queryset: QuerySet, command: str
    ) -> list[int] | None:
        """The ids of an action's selection in id order; None, with a message naming the
        ``command`` that does it instead, when it holds more than ``ACTION_LIMIT`` rows."""
        ids = list(queryset.order_by("pk").values_list("pk", flat=True)[: ACTION_LIMIT + 1])
        if len(ids) <= ACTION_LIMIT:
            return ids
        self.message_user(
            request,
            gettext(
                "Nothing changed: the admin acts on at most %(limit)s rows at once. Narrow the "
                "selection with the filters, or run: %(command)s"
            )
            % {"limit": number_format(ACTION_LIMIT, force_grouping=True), "command": command},
            messages.ERROR,
        )
        return None


def log_change_set(request: HttpRequest, model: type[Model], ids: list[int], message: str) -> None:
    """Log what an action changed: an entry per row up to ``LOG_EACH`` rows, else one."""
    if not ids:
        return
    user_id = cast(int, request.user.pk)  # a logged-in staff user
    objects = model._default_manager.all()
    if len(ids) <= LOG_EACH:
        LogEntry.objects.log_actions(
            user_id, objects.filter(pk__in=ids), CHANGE, change_message=message
        )
        return
    opts = model._meta
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(model),
        object_id=None,
        object_repr=ngettext("%(count)s %(name)s", "%(count)s %(names)s", len(ids))
        % {"count": len(ids), "name": opts.verbose_name, "names": opts.verbose_name_plural},
        action_flag=CHANGE,
        change_message=gettext("%(message)s: %(count)d (ids %(ids)s)")
        % {"message": message, "count": len(ids), "ids": id_ranges(ids)},
    )
