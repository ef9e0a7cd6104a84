"""Columns, stated once from the model's fields: what a column can hold (the widest primary
key, a text field's width, never written again as a number, text without the characters no
column can store), and the pieces of the few statements the ORM cannot say (a claim that
opens attempts, a finish that closes one): a field's value as the database wants it, and a
``SET`` list."""

from __future__ import annotations

import re
from typing import Any

from django.db import connections, models

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


def db_value(model: type[models.Model], field_name: str, value: Any, db: str) -> Any:
    """A Python value as the database ``db`` wants it for ``model.field_name`` (a field's
    name, or a foreign key's ``…_id``), for a raw statement's parameters."""
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field)  # a concrete column, not a reverse relation
    return field.get_db_prep_save(value, connections[db])


def assignments(
    model: type[models.Model], values: dict[str, Any], db: str, *, prefix: str
) -> tuple[str, dict[str, Any]]:
    """``"column" = %(<prefix><name>)s, …`` for ``values`` (field name -> Python value) and
    its parameters (named with ``prefix``, so that two lists can share a statement)."""
    quote = connections[db].ops.quote_name
    parts, params = [], {}
    for name, value in values.items():
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field) and field.column is not None  # a column
        key = f"{prefix}{name}"
        parts.append(f"{quote(field.column)} = %({key})s")
        params[key] = db_value(model, name, value, db)
    return ", ".join(parts), params
