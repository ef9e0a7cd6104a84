"""Pieces of the few statements the ORM cannot say (a claim that opens attempts, a finish
that closes one), built from the model's fields so that no column name or value format is
written twice: a field's value as the database wants it, and a ``SET`` list."""

from __future__ import annotations

from typing import Any

from django.db import connections, models


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
