"""``{% flag_badges flags %}``: quality flags as labelled badges in any template."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from studyqueue.admin import flags

register = template.Library()


@register.simple_tag
def flag_badges(value: object) -> SafeString:
    """The badges of a flags list (``revision.flags``, ``question.explanation_flags``)."""
    return flags.flag_badges(value if isinstance(value, list) else None)
