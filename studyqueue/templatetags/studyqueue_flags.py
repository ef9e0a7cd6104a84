"""``{% flag_badges flags %}``: quality flags as labelled badges in any template
(``revision.flags``, ``question.explanation_flags``)."""

from django import template

from studyqueue.admin import flags

register = template.Library()
register.simple_tag(flags.flag_badges, name="flag_badges")
