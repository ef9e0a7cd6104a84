"""What every studyqueue model shares: the database they are on (``database()``, applied by
``StudyQueueManager``), and what a column can hold (widths, ids, storable text)."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from django.apps import apps
from django.db import models, router
from django.utils.translation import gettext_lazy as _


def database() -> str:
    """The database alias of every studyqueue query, reads included: the router's write alias
    for jobs, as everyone must see what consumers wrote (a replica would show a claimed job
    pending). Code that holds a queryset or instance takes the alias from it instead."""
    # By name: the job model is defined on top of this module (``models.jobs``).
    return router.db_for_write(apps.get_model("studyqueue", "StudyQuestionJob"))


_M = TypeVar("_M", bound=models.Model)


# An LLM server's name (``services.endpoints.endpoint_name``), wherever it is stored.
ENDPOINT_WIDTH = 500


def blank_text(verbose_name: Any, max_length: int, **options: Any) -> models.CharField[str, str]:
    """A short text column that may be blank, and is blank by default (in the database too:
    rows inserted by older code or raw SQL get it)."""
    options.update(blank=True, default="", db_default="")
    return models.CharField(verbose_name=verbose_name, max_length=max_length, **options)


def blank_choice(
    verbose_name: Any, choices: type[models.TextChoices], help_text: Any
) -> models.CharField[str, str]:
    """A ``blank_text`` column holding one of ``choices`` (blank: none yet)."""
    width = choice_width(choices)
    return blank_text(verbose_name, width, choices=choices.choices, help_text=help_text)


def endpoint_field(help_text: Any) -> models.CharField[str, str]:
    """The server that wrote a reply (blank: unknown), on a revision or an attempt."""
    return blank_text(_("LLM server"), ENDPOINT_WIDTH, help_text=help_text)


def external_id_field(help_text: Any) -> models.CharField[str | None, str | None]:
    """A client's own id for a row: unique where it is set (NULLs do not collide)."""
    return models.CharField(
        _("external id"), max_length=200, null=True, blank=True, unique=True, help_text=help_text
    )


def reply_figure(
    verbose_name: Any, **options: Any
) -> models.PositiveIntegerField[int | None, int | None]:
    """A figure of an LLM reply (tokens, milliseconds), on a revision, a summary, an attempt
    or a job: blank when the server did not report it."""
    return models.PositiveIntegerField(verbose_name=verbose_name, null=True, blank=True, **options)


def tokens_counted_field() -> models.BooleanField[bool, bool]:
    """Whether a reply's completion tokens were counted by us, not reported by its server."""
    return models.BooleanField(
        verbose_name=_("tokens counted"),
        default=False,
        db_default=False,
        help_text=_(
            "The server reported no token counts: the completion tokens were counted here "
            "(max_tokens when the reply stopped there, else the server's tokenizer or the "
            "streamed text chunks)."
        ),
    )


class StudyQueueManager(models.Manager[_M]):
    """Every studyqueue model's default and base manager: its querysets run on ``database()``
    unless ``db_manager()`` or ``using()`` names another database."""

    def get_queryset(self) -> models.QuerySet[_M]:
        queryset = super().get_queryset()
        if self._db is None:
            queryset = queryset.using(database())
        return queryset


class StudyQueueModel(models.Model):
    """A studyqueue table: ``StudyQueueManager`` its default and base manager. A subclass's
    ``Meta`` extends ``StudyQueueModel.Meta``."""

    objects = StudyQueueManager()

    class Meta:
        abstract = True
        base_manager_name = "objects"


def choice_width(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)


MAX_ID = 2**63 - 1  # a bigint primary key (every studyqueue id)

_SURROGATE = re.compile("[\ud800-\udfff]")
# What no text column can hold: NUL (PostgreSQL refuses it) and lone surrogates (not UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def width(model: type[models.Model], field_name: str) -> int:
    """The ``max_length`` of ``model.field_name``."""
    field = model._meta.get_field(field_name)
    max_length = getattr(field, "max_length", None)
    if not isinstance(max_length, int):
        raise TypeError(f"{model.__name__}.{field_name} has no max_length")
    return max_length


def fit(model: type[models.Model], field_name: str, text: str) -> str:
    """``text`` cut to the width of ``model.field_name``."""
    return text[: width(model, field_name)]


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character no database column can store."""
    return _UNSTORABLE.search(text) is not None


def storable(text: str) -> str:
    """``text`` as every text column can store it: without NUL, surrogate halves that arrived
    apart joined, a lone one replaced by U+FFFD."""
    text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
