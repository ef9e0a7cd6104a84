"""``{% load studyqueue_labels %}``: codes shown as labels (``studyqueue.admin.labels``):
``{{ name|flag_label }}``, a quality flag's; ``{{ limit.reason|gate_reason }}``, why the
gate's limit last changed, in words."""

from django import template

from studyqueue.admin import labels

register = template.Library()
register.filter("flag_label", labels.flag_label)
register.filter("gate_reason", labels.gate_reason)
