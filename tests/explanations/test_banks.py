"""Question banks in the field's formats: Moodle XML, GIFT and Aiken in (fixtures written
from the formats' documentation, in ``banks/``), a Moodle XML quiz out and in again."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from defusedxml.ElementTree import parse
from django.core.management import CommandError, call_command

from studyqueue.explanations import revisions
from studyqueue.models import ReviewStatus, StudyQuestion
from tests.factories import ExplanationRevisionFactory

pytestmark = pytest.mark.django_db(transaction=True)
BANKS = Path(__file__).parent / "banks"


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def imported() -> dict[str, tuple[str, list[str], str, list[str]]]:
    return {
        q.external_id: (q.text, q.choices, q.answer, [t.name for t in q.tags.all()])
        for q in StudyQuestion.objects.prefetch_related("tags")
    }


def test_moodle_xml_brings_multichoice_and_truefalse_and_counts_what_it_skips():
    out, err = run("importquestions", str(BANKS / "quiz.xml"))
    assert out.strip() == (
        "Imported 2 row(s): 2 created, 0 updated, 0 unchanged; skipped 3 question(s) of types "
        "not explained (essay 1, matching 1, shortanswer 1)."
    )
    assert "read, not imported: answer feedback (1), general feedback (1)" in err
    assert imported() == {
        # The HTML read as text: paragraphs, a line break, an entity; the category a tag.
        "geo-1": (
            "삼각형의 세 내각의 합은?\n\n단위는 도이고, 답은\n하나입니다.",
            ["90", "180", "360 & 720"],
            "180",
            ["기하", "도형", "중2"],
        ),
        "원주율": ("원주율은 3보다 크다.", ["true", "false"], "true", ["기하"]),  # no idnumber
    }


def test_gift_reads_titles_categories_escapes_blanks_and_true_false():
    out, err = run("importquestions", str(BANKS / "questions.gift"))
    assert out.strip() == (
        "Imported 8 row(s): 8 created, 0 updated, 0 unchanged; skipped 5 question(s) of types "
        "not explained (description 1, essay 1, matching 1, numerical 1, shortanswer 1)."
    )
    assert "answer feedback (1), general feedback (1), weights (2)" in err
    questions = imported()
    assert questions["alg-1"] == (
        "일차방정식 2x = 6의 해는?",
        ["x = 3", "x = 2", "x = 12"],
        "x = 3",
        ["대수"],
    )
    assert questions["alg-2"][1:3] == (["4", "6", "7", "9"], "7")
    assert questions["tf-1"][1:3] == (["true", "false"], "false")
    assert questions["tf-2"][2] == "true"
    assert questions["blank"][0] == "대한민국의 수도는 _____ 이다."
    assert questions["esc"][:2] == ("중괄호 { }와 콜론 : 그리고 물결 ~ 표시", ["가", "나"])
    assert questions["weights"][1:3] == (["반", "온", "음"], "온")
    assert questions["html"][0] == "굵은 글씨의 답은?"


def test_aiken_needs_its_format_named_and_reads_both_option_styles(tmp_path):
    with pytest.raises(CommandError, match="cannot tell the format"):
        run("importquestions", str(BANKS / "aiken.txt"))
    out, _ = run("importquestions", str(BANKS / "aiken.txt"), "--format", "aiken")
    assert out.startswith("Imported 2 row(s): 2 created")
    assert sorted(StudyQuestion.objects.values_list("answer", flat=True)) == ["300", "서울"]


@pytest.mark.parametrize(
    ("name", "fmt", "reasons"),
    [
        ("bad.gift", "gift", ["line 1: 2 right answers, not one", "line 3: 0 right answers"]),
        (
            "bad_aiken.txt",
            "aiken",
            ["line 1: ANSWER: D is none of AB", "line 6: options with no ANSWER: line"],
        ),
    ],
)
def test_a_bad_question_is_named_by_its_line_and_the_file_imports_nothing(name, fmt, reasons):
    with pytest.raises(CommandError) as info:
        run("importquestions", str(BANKS / name), "--format", fmt)
    assert str(info.value).startswith("2 invalid row(s); nothing imported")
    for reason in reasons:
        assert reason in str(info.value)
    assert not StudyQuestion.objects.exists()
    out, _ = run("importquestions", str(BANKS / name), "--format", fmt, "--skip-invalid")
    assert out.startswith("Imported 1 row(s): 1 created")


def test_a_moodle_question_is_named_by_its_position_and_name(tmp_path):
    bad = tmp_path / "bad.xml"
    text = (BANKS / "quiz.xml").read_text()
    bad.write_text(
        text.replace(
            'fraction="0" format="html"><text><![CDATA[<p>90',
            'fraction="100" format="html"><text><![CDATA[<p>90',
        )
    )
    with pytest.raises(
        CommandError, match=r"question 2 \(삼각형의 내각\): 2 answers at fraction 100"
    ):
        run("importquestions", str(bad))
    assert not StudyQuestion.objects.exists()


@pytest.mark.parametrize("name", ["bomb.xml", "external.xml"])
def test_an_xml_bomb_or_an_external_entity_is_refused_in_one_line(name):
    with pytest.raises(CommandError) as info:
        run("importquestions", str(BANKS / name))
    assert str(info.value) == (
        f"{BANKS / name}, line 1: refused: it declares a DTD or entities (an XML bomb, an "
        "external file); nothing imported"
    )


def test_not_xml_says_where(tmp_path):
    broken = tmp_path / "broken.xml"
    broken.write_text("<quiz>\n<question type='multichoice'>\n</quiz>\n")
    with pytest.raises(CommandError, match="line 3: not XML: mismatched tag"):
        run("importquestions", str(broken))


def test_a_moodle_export_imports_again_to_the_same_questions_with_their_explanations(tmp_path):
    run("importquestions", str(BANKS / "questions.gift"))
    for question in StudyQuestion.objects.all():
        revision = ExplanationRevisionFactory(
            question=question, text=f"{question.external_id}의 풀이:\n첫째 <줄> & 둘째 줄"
        )
        assert revisions.make_current(revision)
    StudyQuestion.objects.create(text="보기 없는 문제", external_id="open")
    before = imported()
    quiz = tmp_path / "quiz.xml"
    _, err = run("exportexplanations", "--format", "moodle", "--output", str(quiz))
    assert "exported 8 question(s)" in err
    questions = parse(quiz).getroot().findall("question")
    first = questions[0]
    assert (first.get("type"), first.findtext("idnumber")) == ("multichoice", "alg-1")
    assert first.findtext("answernumbering") == "123"
    assert [a.get("fraction") for a in first.findall("answer")] == ["100", "0", "0"]
    assert first.findtext("generalfeedback/text") == (
        "<p>alg-1의 풀이:<br>첫째 &lt;줄&gt; &amp; 둘째 줄</p>"
    )
    assert [t.text for t in first.findall("tags/tag/text")] == ["대수"]
    StudyQuestion.objects.all().delete()
    out, _ = run("importquestions", str(quiz))
    assert out.startswith("Imported 8 row(s): 8 created")
    after = imported()
    del before["open"]
    assert after == before


def test_the_moodle_export_of_approved_explanations_leaves_out_the_others(tmp_path):
    run("importquestions", str(BANKS / "aiken.txt"), "--format", "aiken")
    for number, question in enumerate(StudyQuestion.objects.order_by("pk")):
        status = ReviewStatus.APPROVED if number == 0 else ReviewStatus.UNREVIEWED
        revision = ExplanationRevisionFactory(question=question, review_status=status)
        assert revisions.make_current(revision)
    out, err = run("exportexplanations", "--format", "moodle", "--approved")
    assert out.count("<question ") == 1 and "대한민국의 수도는?" in out
    assert "exported 1 question(s)" in err
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<quiz>\n')
    assert out.endswith("</quiz>\n")
