"""Flags scored against the reviewers' decisions (``explanations/flag_trust.py``)."""

from __future__ import annotations

import pytest

from studyqueue.explanations import flag_trust
from studyqueue.explanations.flag_trust import MIN_DECISIONS, Rate
from studyqueue.models import StudyQuestion
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("hits", "total"), [(12, 32), (0, 20), (20, 20), (1, 3), (81, 263)])
def test_the_wilson_interval_solves_its_defining_equation(hits, total):
    """Each bound b is where the observed share p lies z standard errors away:
    (p - b)^2 = z^2 b (1 - b) / n."""
    low, high = Rate(hits, total).interval
    p = hits / total
    for bound in (low, high):
        if bound in (0.0, 1.0) and bound == p:
            continue  # a share of 0 or 1: its own bound
        assert (p - bound) ** 2 == pytest.approx(1.959964**2 * bound * (1 - bound) / total)
    assert 0 <= low <= p <= high <= 1


def test_a_rate_says_when_it_has_too_few_decisions():
    assert not Rate(3, MIN_DECISIONS - 1).enough
    assert Rate(3, MIN_DECISIONS).enough
    assert Rate(0, 0).interval is None


def test_each_flag_is_scored_per_prompt_version_against_rejections():
    question = StudyQuestionFactory()

    def revisions(n: int, flags: list[str], review: str, version: str = "v1") -> None:
        for _ in range(n):
            ExplanationRevisionFactory(
                question=question, flags=flags, review_status=review, prompt_version=version
            )

    revisions(6, ["verifier_disagrees"], "rejected")
    revisions(2, ["verifier_disagrees"], "edited")  # an edit is a rejection of the text
    revisions(2, ["verifier_disagrees", "too_short"], "approved")
    revisions(3, [], "rejected")
    revisions(17, [], "approved")
    revisions(5, ["verifier_disagrees"], "unreviewed")  # no decision: no label
    revisions(4, ["answer_mismatch"], "rejected", version="v2")
    ExplanationRevisionFactory(question=question, flags=[], review_status="rejected", author="r")
    scored = {t.flag: t for t in flag_trust.collect()["v1"]}
    disagrees = scored["verifier_disagrees"]
    assert (disagrees.flagged_bad, disagrees.flagged_good) == (8, 2)
    assert (disagrees.unflagged_bad, disagrees.unflagged_good) == (3, 17)
    assert disagrees.precision == Rate(8, 10) and not disagrees.precision.enough
    assert disagrees.recall == Rate(8, 11)
    assert scored["too_short"].precision == Rate(0, 2)
    any_flag = scored["any"]
    assert (any_flag.flagged_bad, any_flag.flagged_good) == (8, 2)
    assert (any_flag.unflagged_bad, any_flag.unflagged_good) == (3, 17)  # 30 decisions
    v2 = {t.flag: t for t in flag_trust.collect()["v2"]}
    assert v2["answer_mismatch"].recall == Rate(4, 4)
    assert "question_changed" not in scored  # set on questions, never on a reply
    assert StudyQuestion.objects.count() == 1
