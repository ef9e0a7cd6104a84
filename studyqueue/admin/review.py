"""The review page: one question at a time, a decision per key press, the next one at once.

GET shows an item (``?question=ID``, else the first waiting); POST to ``decide/`` applies
Approve, Reject or Edit through ``studyqueue.review`` and redirects to the next waiting
question. Permission ``studyqueue.review_explanation``; every decision is written to the
admin log in the same transaction."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext

from studyqueue import queue, review
from studyqueue.admin.common import PageAdmin
from studyqueue.diff import side_by_side
from studyqueue.exceptions import ReviewConflict
from studyqueue.models import ExplanationReview, ReviewStatus, StudyQuestion

PERMISSION = "studyqueue.review_explanation"


def _question_id(value: str | None) -> int | None:
    """A question id from the query string; None when absent or not a plain id."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


@admin.register(ExplanationReview)
class ExplanationReviewAdmin(PageAdmin):
    """Reviewers (``review_explanation``) judge explanations here; nothing else is listed."""

    permission = PERMISSION

    def get_urls(self) -> list:
        return [
            path(
                "",
                self.admin_site.admin_view(self.review_view),
                name="studyqueue_explanationreview_changelist",
            ),
            path(
                "decide/",
                self.admin_site.admin_view(self.decide_view),
                name="studyqueue_explanationreview_decide",
            ),
        ]

    def _url(self, question_id: int | None = None) -> str:
        url = reverse("admin:studyqueue_explanationreview_changelist")
        return url if question_id is None else f"{url}?question={question_id}"

    def review_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        if not self.has_view_permission(request):
            raise PermissionDenied
        asked = _question_id(request.GET.get("question"))
        question_id = asked if asked is not None else review.next_id()
        current = review.item(question_id) if question_id is not None else None
        waiting, flagged = review.counts()
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": gettext("Review explanations"),
            "opts": self.model._meta,
            "item": current,
            "asked": asked,
            "waiting": waiting,
            "flagged": flagged,
            "capped": waiting >= review.COUNT_CAP,
            **(extra_context or {}),
        }
        if current is not None:
            question = current.question
            context.update(
                question=question,
                revision=current.revision,
                previous=current.previous,
                previous_url=reverse(
                    "admin:studyqueue_explanationrevision_change", args=[current.previous.pk]
                )
                if current.previous is not None
                else None,
                diff=side_by_side(current.previous.text, current.revision.text)
                if current.previous is not None
                else None,
                in_queue=review.waiting().filter(pk=question.pk).exists(),
                next_url=self._step_url(question.pk, backwards=False),
                prev_question_url=self._step_url(question.pk, backwards=True),
                question_url=reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
            )
        return TemplateResponse(request, "admin/studyqueue/review.html", context)

    def _step_url(self, question_id: int, *, backwards: bool) -> str | None:
        found = review.next_id(question_id, backwards=backwards)
        return self._url(found) if found is not None and found != question_id else None

    def decide_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return redirect(self._url())
        try:
            revision_id = int(request.POST.get("revision", ""))
            decision = review.Decision(request.POST.get("decision", ""))
        except ValueError:
            self.message_user(request, gettext("Nothing decided: a bad form."), messages.ERROR)
            return redirect(self._url())
        by = request.user.get_username()
        try:
            with transaction.atomic(using=queue.database()):  # the decision and its log entry
                result = review.decide(
                    revision_id, decision, by=by, text=request.POST.get("text", "")
                )
                question = StudyQuestion.objects.using(queue.database()).get(
                    pk=result.decided.question_id
                )
                self.log_change(request, question, self._log_message(result))
        except ReviewConflict as exc:
            self.message_user(request, gettext("Nothing decided: %s.") % exc, messages.WARNING)
            return redirect(self._back(request))
        except ValueError as exc:  # an empty correction
            self.message_user(request, gettext("Nothing decided: %s.") % exc, messages.ERROR)
            return redirect(self._back(request))
        self.message_user(request, self._summary(question, result), messages.SUCCESS)
        following = review.next_id(question.pk)
        return HttpResponseRedirect(self._url(following))

    def _back(self, request: HttpRequest) -> str:
        back = request.POST.get("back", "")
        safe = url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()})
        return back if back and safe else self._url()

    def _log_message(self, result: review.Result) -> str:
        status = ReviewStatus(result.decided.review_status)
        message = gettext("Review: %(status)s revision %(revision)s") % {
            "status": status.label,
            "revision": result.decided.pk,
        }
        if status == ReviewStatus.EDITED and result.current is not None:
            message += gettext("; the correction is revision %(revision)s") % {
                "revision": result.current.pk
            }
        if result.job_id is not None:
            message += gettext("; regeneration job %(job)s") % {"job": result.job_id}
        return message

    def _summary(self, question: StudyQuestion, result: review.Result) -> str:
        status = result.decided.review_status
        values = {"question": question.pk, "revision": result.decided.pk}
        if status == ReviewStatus.APPROVED:
            return gettext("Question #%(question)s: revision %(revision)s approved.") % values
        if status == ReviewStatus.EDITED:
            assert result.current is not None
            return gettext(
                "Question #%(question)s: your correction is revision %(new)s, now current."
            ) % {**values, "new": result.current.pk}
        if result.job_id is not None:
            return gettext(
                "Question #%(question)s: revision %(revision)s rejected; regeneration job "
                "%(job)s queued."
            ) % {**values, "job": result.job_id}
        return (
            gettext(
                "Question #%(question)s: candidate %(revision)s rejected; the approved explanation "
                "stays."
            )
            % values
        )
