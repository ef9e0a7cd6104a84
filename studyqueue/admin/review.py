"""The review page: one question at a time, a decision per key press, the next one at once.
Each form carries the state the page showed (``review_queue.Seen``): a decision on a page
another reviewer has overtaken is refused. Every decision is logged in its transaction."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.text import Truncator
from django.utils.translation import gettext

from studyqueue.admin.common import PageAdmin
from studyqueue.admin.labels import flag_labels
from studyqueue.exceptions import ReviewConflict, UnchangedEdit
from studyqueue.explanations import answers, key_audit, review_queue, step_check
from studyqueue.explanations.diff import side_by_side
from studyqueue.forms import CorrectionForm
from studyqueue.models import ExplanationReview, ExplanationRevision, ReviewStatus, StudyQuestion

PERMISSION = "studyqueue.review_explanation"


def _question_id(value: str | None) -> int | None:
    """A question id from the query string; None when absent or not a plain id."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


def with_choice(answer: str, choices: list[str]) -> str:
    """An answer as the page shows it: a number or letter with its choice's text after it
    (``1 (드시다)``); any other as it is."""
    number = answers.key_choice(answer, choices) if answer.strip() and choices else None
    if number is None or choices[number - 1].strip() == answer.strip():
        return answer
    return f"{answer} ({choices[number - 1]})"


def verifier_shown(revision: ExplanationRevision, choices: list[str]) -> str:
    """The blind verifier's choice as the page shows it: ``2 (서울)``, "none", "not checked yet"."""
    if revision.verified_at is None:
        return gettext("not checked yet")
    number = revision.verifier_answer
    if number is None or not 1 <= number <= len(choices):
        return gettext("none")
    return f"{number} ({choices[number - 1]})"


def step_check_shown(revision: ExplanationRevision) -> str:
    """The step check's verdict as the page shows it: "sentence 3", "No wrong step"…"""
    if not revision.step_check:
        return gettext("not checked yet")
    if revision.wrong_step is not None:
        return gettext("sentence %(number)s") % {"number": revision.wrong_step}
    return revision.get_step_check_display()


def explanation_shown(revision: ExplanationRevision, limit: int = 20000) -> str:
    """The explanation cut to ``limit`` characters, the step check's wrong sentence marked."""
    text = Truncator(revision.text).chars(limit)
    spans = step_check.steps(revision.text)
    number = revision.wrong_step or 0
    if not 1 <= number <= len(spans) or spans[number - 1][1] >= limit:
        return text  # escaped by the template
    start, end = spans[number - 1]
    return format_html("{}<mark>{}</mark>{}", text[:start], text[start:end], text[end:])


def _status(current: review_queue.Item) -> str:
    """The review status of the revision judged; for a candidate, what it would replace."""
    revision, previous = current.revision, current.previous
    if not revision.candidate:
        return revision.get_review_status_display()
    if previous is not None and previous.review_status == ReviewStatus.EDITED:
        return gettext("candidate for a reviewer-edited explanation")
    if previous is not None and previous.review_status == ReviewStatus.APPROVED:
        return gettext("candidate for an approved explanation")
    return gettext("candidate")


def _diff(current: review_queue.Item) -> dict[str, Any]:
    """The side-by-side with the previous revision (for a candidate: the current explanation),
    its heading and column labels."""
    revision, previous = current.revision, current.previous
    if previous is None:
        return {}
    shown = {
        "diff": side_by_side(previous.text, revision.text),
        "previous_url": reverse("admin:studyqueue_explanationrevision_change", args=[previous.pk]),
    }
    if revision.candidate:
        return {
            **shown,
            "diff_heading": gettext("Changes from the current explanation"),
            "old_label": gettext("revision %(id)s: the current explanation, %(status)s")
            % {"id": previous.pk, "status": previous.get_review_status_display()},
            "new_label": gettext("revision %(id)s: the candidate") % {"id": revision.pk},
        }
    heading = gettext("Changes from the previous revision")
    if previous.pk == current.question.current_revision_id:
        heading += f" ({gettext('current')})"
    return {**shown, "diff_heading": heading}


@admin.register(ExplanationReview)
class ExplanationReviewAdmin(PageAdmin):
    """Reviewers (``review_explanation``) judge explanations here; nothing else is listed."""

    permission = PERMISSION

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        name = "studyqueue_explanationreview_"
        return [
            path("", view(self.review_view), name=f"{name}changelist"),
            path("decide/", view(self.decide_view), name=f"{name}decide"),
            path("key-check/", view(self.key_check_view), name=f"{name}keycheck"),
        ]

    def _url(self, question_id: int | None = None) -> str:
        url = reverse("admin:studyqueue_explanationreview_changelist")
        return url if question_id is None else f"{url}?question={question_id}"

    def review_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        key_check = _question_id(request.GET.get("key_check"))
        if key_check is not None:
            return self._key_check_page(request, key_check)
        asked = _question_id(request.GET.get("question"))
        if asked is None:
            # A disputed key goes first: a question for a person before any explanation.
            first = key_audit.key_checks().values_list("pk", flat=True).first()
            if first is not None:
                return self._key_check_page(request, first)
        question_id = asked if asked is not None else review_queue.next_id()
        return self._page(request, question_id, asked)

    def _key_check_page(self, request: HttpRequest, question_id: int) -> TemplateResponse:
        """A disputed key: the question, the key, what each sample answered."""
        question = StudyQuestion.objects.filter(pk=question_id).first()
        waiting = key_audit.key_checks()
        context: dict[str, Any] = {
            **self.page_context(request, gettext("Key check")),
            "question": question,
            "key_checks": waiting.values("pk")[: review_queue.COUNT_CAP].count(),
            "pending": question is not None and waiting.filter(pk=question.pk).exists(),
            "audit_rates": key_audit.rates(),
        }
        if question is not None:
            answer = question.key_audit_answer
            samples = [
                {
                    "answer": sample.get("answer"),
                    "shown": with_choice(str(sample["answer"]), question.choices)
                    if sample.get("answer")
                    else gettext("unread"),
                    "reply": sample.get("reply", ""),
                }
                for sample in question.key_audit_samples
                if isinstance(sample, dict)
            ]
            context.update(
                key_shown=with_choice(question.answer, question.choices),
                model_shown=with_choice(str(answer), question.choices) if answer else "",
                samples=samples,
                seen=question.content_hash(),
                question_url=reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
            )
        return TemplateResponse(request, "admin/studyqueue/key_check.html", context)

    def key_check_view(self, request: HttpRequest) -> HttpResponse:
        """Keep the key or take the model's choice (``key_audit.decide_key``), logged."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return redirect(self._url())
        question_id = _question_id(request.POST.get("question"))
        decision = request.POST.get("decision", "")
        if question_id is None or decision not in ("keep", "take"):
            self.message_user(request, gettext("Nothing decided: a bad form."), messages.ERROR)
            return redirect(self._url())
        question = StudyQuestion.objects.filter(pk=question_id).first()
        take = decision == "take"
        if question is None or not self._decide_key(request, question, take):
            self.message_user(
                request,
                gettext(
                    "Nothing decided: this key is no longer disputed, or the question changed "
                    "meanwhile."
                ),
                messages.WARNING,
            )
            return redirect(f"{self._url()}?key_check={question_id}")
        summary = (
            gettext("Question #%(question)s: the key is now %(key)s.")
            if take
            else gettext("Question #%(question)s: the key %(key)s stays.")
        )
        self.message_user(
            request, summary % {"question": question.pk, "key": question.answer}, messages.SUCCESS
        )
        return redirect(self._url())

    def _decide_key(self, request: HttpRequest, question: StudyQuestion, take: bool) -> bool:
        with transaction.atomic(using=question._state.db):  # the decision and its log entry
            by, seen = request.user.get_username(), request.POST.get("seen", "")
            if not key_audit.decide_key(question, take_model_choice=take, by=by, seen=seen):
                return False
            question.refresh_from_db()
            message = (
                gettext("Key check: the key changed to the model's choice (%(key)s)")
                if take
                else gettext("Key check: the key %(key)s kept")
            ) % {"key": question.answer}
            self.log_change(request, question, message)
        return True

    def _page(
        self,
        request: HttpRequest,
        question_id: int | None,
        asked: int | None,
        extra_context: dict | None = None,
    ) -> TemplateResponse:
        current = review_queue.item(question_id) if question_id is not None else None
        waiting, flagged = review_queue.counts()
        context: dict[str, Any] = {
            **self.page_context(request, gettext("Review explanations")),
            "item": current,
            "asked": asked,
            "waiting": waiting,
            "flagged": flagged,
            "capped": waiting >= review_queue.COUNT_CAP,
            "audit_rates": key_audit.rates(),
            # Where a refused decision comes back to: this page (not the decide URL).
            "back_url": request.get_full_path() if request.method == "GET" else self._url(asked),
        }
        if current is not None:
            question = current.question
            context.update(
                question=question,
                revision=current.revision,
                previous=current.previous,
                status=_status(current),
                key_shown=with_choice(question.answer, question.choices),
                stated_shown=with_choice(current.revision.stated_answer, question.choices),
                verifier_shown=verifier_shown(current.revision, question.choices),
                step_check_shown=step_check_shown(current.revision),
                explanation_shown=explanation_shown(current.revision),
                **_diff(current),
                # The state this page shows: every decision form carries it back.
                seen=current.seen.token(),
                edit_text=current.revision.text,
                in_queue=review_queue.waiting().filter(pk=question.pk).exists(),
                next_url=self._step_url(question.pk, backwards=False),
                prev_question_url=self._step_url(question.pk, backwards=True),
                question_url=reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
            )
        context.update(extra_context or {})
        return TemplateResponse(request, "admin/studyqueue/review.html", context)

    def _step_url(self, question_id: int, *, backwards: bool) -> str | None:
        found = review_queue.next_id(question_id, backwards=backwards)
        return self._url(found) if found is not None and found != question_id else None

    def decide_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return redirect(self._url())
        try:
            revision_id = int(request.POST.get("revision", ""))
            decision = ReviewStatus(request.POST.get("decision", ""))
            if decision not in review_queue.DECISIONS:
                raise ValueError(decision)
            seen = review_queue.Seen.parse(request.POST.get("seen", ""))
        except ValueError:
            self.message_user(request, gettext("Nothing decided: a bad form."), messages.ERROR)
            return redirect(self._url())
        text = ""
        if decision is ReviewStatus.EDITED:
            form = CorrectionForm(request.POST)
            if not form.is_valid():
                return self._edit_again(
                    request, revision_id, [str(error) for error in form.errors.get("text", [])]
                )
            text = form.cleaned_data["text"]
        by = request.user.get_username()
        try:
            questions = StudyQuestion.objects.all()
            with transaction.atomic(using=questions.db):  # the decision and its log entry
                result = review_queue.decide(revision_id, decision, by=by, text=text, seen=seen)
                question = questions.get(pk=result.decided.question_id)
                self.log_change(request, question, self._log_message(result))
        except UnchangedEdit as exc:
            self.message_user(
                request,
                gettext("Nothing changed: %s. Nothing was decided; approve it if it is right.")
                % exc,
                messages.INFO,
            )
            return redirect(self._back(request))
        except (ReviewConflict, ValueError) as exc:
            if decision is ReviewStatus.EDITED:  # their text stays in the box
                return self._edit_again(request, revision_id, [gettext("Nothing saved: %s.") % exc])
            level = messages.WARNING if isinstance(exc, ReviewConflict) else messages.ERROR
            self.message_user(request, gettext("Nothing decided: %s.") % exc, level)
            return redirect(self._back(request))
        self.message_user(request, self._summary(question, result), messages.SUCCESS)
        if decision is ReviewStatus.EDITED and result.current is not None:
            flagged = result.current.flags
            if flagged:  # the same check as a model's reply: say what it found
                self.message_user(
                    request,
                    gettext("Your correction is flagged: %(flags)s.")
                    % {"flags": flag_labels(flagged)},
                    messages.WARNING,
                )
        following = review_queue.next_id(question.pk)
        return HttpResponseRedirect(self._url(following))

    def _edit_again(
        self, request: HttpRequest, revision_id: int, errors: list[str]
    ) -> TemplateResponse:
        """The revision's question again, the correction box open with the reviewer's text and
        why it was not saved."""
        question_id = (
            ExplanationReview.objects.filter(pk=revision_id)
            .values_list("question_id", flat=True)
            .first()
        )
        extra = {
            "edit_text": request.POST.get("text", ""),
            "edit_errors": errors,
            "edit_open": True,
        }
        return self._page(request, question_id, question_id, extra)

    def _back(self, request: HttpRequest) -> str:
        back = request.POST.get("back", "")
        safe = url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()})
        return back if back and safe else self._url()

    def _log_message(self, result: review_queue.Result) -> str:
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

    def _summary(self, question: StudyQuestion, result: review_queue.Result) -> str:
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
