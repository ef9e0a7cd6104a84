"""What a database column can hold, stated once: the widest primary key, a text field's
width (read from the model field, never written again as a number), and text without the
characters no column can store."""

from __future__ import annotations

import re

from django.db import models

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
    """Whether ``text`` holds a character no database column can store (a form refuses
    it; ``storable`` cleans a reply)."""
    return _UNSTORABLE.search(text) is not None


def storable(text: str) -> str:
    """``text`` as every text column can store it: without NUL (PostgreSQL refuses it), and
    valid Unicode: surrogate halves that arrived apart (JSON ``\\ud83d`` then ``\\ude00``)
    joined, a lone one replaced by U+FFFD (no database encodes it)."""
    text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
