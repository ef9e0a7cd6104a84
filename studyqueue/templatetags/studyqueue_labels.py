"""``{% load studyqueue_labels %}``: codes shown as labels (``studyqueue.admin.labels``)."""

from __future__ import annotations

from django import template

from studyqueue.admin import labels

register = template.Library()


@register.filter
def flag_label(value: object) -> str:
    """``{{ name|flag_label }}``: a quality flag's label."""
    return labels.flag_label(value)


@register.filter
def gate_reason(value: object) -> str:
    """``{{ limit.reason|gate_reason }}``: why the gate's limit last changed, in words."""
    return labels.gate_reason(value)
