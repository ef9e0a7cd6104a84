"""Question banks in the formats teachers and learning platforms use: Moodle XML, GIFT and
Aiken read into import records (``transfer.parse`` checks them like any row), and a Moodle
XML quiz written from an export's rows, each explanation as its question's general feedback.

A reader yields ``(where, record)``: ``where`` is a line number, or for Moodle XML the
question's position and name; a record is a dict of import fields, or a ``ValueError``.
What it leaves out is counted, never dropped in silence: ``skipped`` by question type (the
types the app does not explain), ``ignored`` by what was read but not kept."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby
from typing import Any

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring
from django.utils.html import linebreaks, strip_tags
from django.utils.translation import gettext as _

from studyqueue.explanations import answers

Records = Iterator[tuple[int | str, Any]]
TRUE_FALSE = ["true", "false"]  # a true/false question's choices, in Moodle's own words
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_BLOCK_END = re.compile(r"</(?:p|div|li|h\d)>", re.IGNORECASE)
# GIFT's escaped characters, held as private-use stand-ins while its markup is read.
_ESCAPED = {"\\" + char: chr(0xE000 + n) for n, char in enumerate("~=#{}:")}
_AIKEN_CHOICE = re.compile(r"([A-Z])[.)]\s+(.*)")
_AIKEN_ANSWER = re.compile(r"ANSWER:\s*(\S*)\s*$")


class FileError(ValueError):
    """The file as a whole cannot be read (its CSV header, a stray quote that merges rows,
    XML that does not parse): nothing in it can be trusted, so nothing is imported, even with
    --skip-invalid."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = line, reason

    def __str__(self) -> str:
        return _("line %(line)s: %(reason)s") % {"line": self.line, "reason": self.reason}


def html_text(markup: str | None) -> str:
    """HTML as text: paragraphs apart by a blank line, breaks as line ends, entities read."""
    text = re.sub(r"\s*\n\s*", " ", markup or "")  # a line end in HTML is a space
    text = _BLOCK_END.sub("\n\n", _BREAK.sub("\n", text))
    text = html.unescape(strip_tags(text)).replace("\xa0", " ")
    text = "\n".join(line.strip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _category(path: str) -> list[str]:
    """A category path's last part, as a tag (``$course$/top/기하`` -> ``기하``)."""
    last = path.strip().rstrip("/").rsplit("/", 1)[-1].strip()
    return [last] if last and not last.startswith("$") and last != "top" else []


def moodle(text: str, skipped: Counter[str], ignored: Counter[str]) -> Records:
    """Moodle XML's ``multichoice`` (one answer at fraction 100) and ``truefalse``."""
    try:
        quiz = fromstring(text, forbid_dtd=True)
    except DefusedXmlException:
        refused = _("refused: it declares a DTD or entities (an XML bomb, an external file)")
        raise FileError(1, refused) from None
    except ET.ParseError as exc:
        raise FileError(exc.position[0], _("not XML: %(reason)s") % {"reason": exc}) from None
    if quiz.tag != "quiz":
        raise FileError(1, _("not a Moodle XML quiz (its root is <%(tag)s>)") % {"tag": quiz.tag})
    return _moodle_questions(quiz, skipped, ignored)


def _moodle_questions(quiz: ET.Element, skipped: Counter[str], ignored: Counter[str]) -> Records:
    category: list[str] = []
    for position, question in enumerate(quiz.iter("question"), start=1):
        kind = question.get("type", "")
        if kind == "category":
            category = _category(question.findtext("category/text") or "")
            continue
        name = (question.findtext("name/text") or "").strip()
        where = _("question %(number)s (%(name)s)") % {"number": position, "name": name}
        if kind not in ("multichoice", "truefalse"):
            skipped[kind or "?"] += 1
            continue
        ignored[_("general feedback")] += bool(html_text(question.findtext("generalfeedback/text")))
        choices, right = [], []
        for choice in question.iterfind("answer"):
            choices.append(html_text(choice.findtext("text")))
            ignored[_("answer feedback")] += bool(html_text(choice.findtext("feedback/text")))
            if re.fullmatch(r"\s*100(\.0*)?\s*", choice.get("fraction") or ""):
                right.append(choices[-1])
        if len(right) != 1:
            count = {"count": len(right)}
            yield where, ValueError(_("%(count)s answers at fraction 100, not one") % count)
            continue
        tags = [tag.findtext("text") or "" for tag in question.iterfind("tags/tag")]
        yield (
            where,
            {
                "text": html_text(question.findtext("questiontext/text")),
                "choices": [c.lower() for c in choices] if kind == "truefalse" else choices,
                "answer": right[0].lower() if kind == "truefalse" else right[0],
                "external_id": (question.findtext("idnumber") or "").strip() or name,
                "tags": tags + category,
            },
        )


def _blocks(text: str) -> Iterator[tuple[int, str]]:
    """GIFT's questions: runs of lines apart by blank lines, ``//`` comment lines left out."""
    numbered = enumerate(text.splitlines(), start=1)
    kept = [(n, line) for n, line in numbered if not line.lstrip().startswith("//")]
    for filled, run in groupby(kept, key=lambda numbered_line: bool(numbered_line[1].strip())):
        if filled:
            lines = list(run)
            yield lines[0][0], "\n".join(line for _n, line in lines)


def gift(text: str, skipped: Counter[str], ignored: Counter[str]) -> Records:
    """GIFT's multiple choice (``{=right ~wrong}``, on one line or several, a blank to fill
    when text follows) and true/false (``{T}``, ``{FALSE}``)."""
    for escaped, stand_in in _ESCAPED.items():
        text = text.replace(escaped, stand_in)
    category: list[str] = []
    for line, block in _blocks(text.replace("\\n", "\n")):
        if block.startswith("$CATEGORY:"):
            category = _category(block.removeprefix("$CATEGORY:"))
            continue
        title = re.match(r"::(.*?)::", block, re.DOTALL)
        body = block[title.end() :] if title else block
        markup = re.match(r"\s*\[(html|moodle|plain|markdown)\]", body)
        opened, closed = body.find("{"), body.rfind("}")
        if opened < 0 or closed < opened:
            skipped["description"] += 1
            continue
        inside, _marks, feedback = body[opened + 1 : closed].partition("####")
        ignored[_("general feedback")] += bool(feedback.strip())
        question = body[markup.end() if markup else 0 : opened].strip()
        if after := body[closed + 1 :].strip():
            question += " _____ " + after  # a missing word
        try:
            record = _gift_answers(inside.strip(), skipped, ignored)
        except ValueError as exc:
            yield line, exc
            continue
        if record is None:
            continue
        if markup and markup.group(1) == "html":
            question = html_text(question)
        record.update(text=_plain(question), tags=category or None)
        if title:
            record["external_id"] = _plain(title.group(1))
        yield line, record


def _gift_answers(
    inside: str, skipped: Counter[str], ignored: Counter[str]
) -> dict[str, Any] | None:
    """The choices and the key in a GIFT answer block; None for a type not explained."""
    truth = re.fullmatch(r"(T|F|TRUE|FALSE)\s*(#.*)?", inside, re.DOTALL | re.IGNORECASE)
    if truth:
        ignored[_("answer feedback")] += bool(truth.group(2))
        return {"choices": TRUE_FALSE, "answer": TRUE_FALSE[truth.group(1)[0] in "Ff"]}
    kind = (
        "essay" if not inside
        else "numerical" if inside.startswith("#")
        else "matching" if "->" in inside
        else "shortanswer" if "~" not in inside  # only right answers: one to type
        else ""
    )  # fmt: skip
    if kind:
        skipped[kind] += 1
        return None
    marked = re.findall(r"([=~])([^=~]*)", inside)
    choices, right = [], []
    for mark, answer in marked:
        weight = re.match(r"\s*%-?[\d.]+%", answer)
        ignored[_("weights")] += bool(weight)
        answer, _mark, note = answer[weight.end() if weight else 0 :].partition("#")
        ignored[_("answer feedback")] += bool(note.strip())
        choices.append(_plain(answer))
        if mark == "=":
            right.append(choices[-1])
    if len(right) != 1:
        raise ValueError(_("%(count)s right answers, not one") % {"count": len(right)})
    return {"choices": choices, "answer": right[0]}


def _plain(text: str) -> str:
    """GIFT's escaped characters as themselves."""
    for escaped, stand_in in _ESCAPED.items():
        text = text.replace(stand_in, escaped[1])
    return text.strip()


def aiken(text: str, skipped: Counter[str], ignored: Counter[str]) -> Records:
    """Aiken: the question's line, options ``A)`` or ``A.``, then ``ANSWER: X``."""
    start, question, options = 0, "", dict[str, str]()
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        line = line.strip()
        if not line:
            continue
        if (answer := _AIKEN_ANSWER.fullmatch(line)) and options:
            letter = answer.group(1).upper()
            if letter not in options:
                reason = {"letter": letter, "letters": "".join(options)}
                yield start, ValueError(_("ANSWER: %(letter)s is none of %(letters)s") % reason)
            else:
                record = {"text": question, "choices": list(options.values())}
                yield start, {**record, "answer": options[letter]}
            start, question, options = 0, "", {}
        elif (choice := _AIKEN_CHOICE.fullmatch(line)) and question:
            options[choice.group(1)] = choice.group(2).strip()
        elif options:
            yield start, ValueError(_("options with no ANSWER: line after them"))
            start, question, options = number, line, {}
        else:
            start, question = start or number, f"{question}\n{line}".strip()
    if question:
        no_answer = _("options with no ANSWER: line after them")
        yield start, ValueError(no_answer if options else _("no options and no ANSWER: line"))


Reader = Callable[[str, Counter[str], Counter[str]], Records]  # text, skipped, ignored
READERS: dict[str, Reader] = {"moodle": moodle, "gift": gift, "aiken": aiken}


def _html(text: str | None) -> str:
    return linebreaks(text, autoescape=True) if text else ""


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        ET.SubElement(element, "text").text = text
    return element


def moodle_quiz(rows: Iterable[dict[str, Any]], left_out: Counter[str]) -> Iterator[str]:
    """A Moodle XML quiz: one ``multichoice`` a question with choices and a key among them
    (the others counted in ``left_out``), its explanation the general feedback."""
    yield '<?xml version="1.0" encoding="UTF-8"?>\n<quiz>\n'
    for row in rows:
        key = answers.key_choice(row["answer"], row["choices"]) if row["choices"] else None
        if key is None:
            left_out[_("no choices, or a key that names none")] += 1
            continue
        question = ET.Element("question", type="multichoice")
        _element(question, "name", row["external_id"] or row["text"][:60])
        _element(question, "questiontext", _html(row["text"]), format="html")
        _element(question, "generalfeedback", _html(row["explanation"]), format="html")
        ET.SubElement(question, "idnumber").text = row["external_id"] or ""
        for tag, value in (("single", "true"), ("shuffleanswers", "true")):
            ET.SubElement(question, tag).text = value
        ET.SubElement(question, "answernumbering").text = "123"
        for number, choice in enumerate(row["choices"], start=1):
            fraction = "100" if number == key else "0"
            _element(question, "answer", _html(choice), fraction=fraction, format="html")
        tags = ET.SubElement(question, "tags")
        for tag in row["tags"]:
            _element(tags, "tag", tag)
        ET.indent(question, level=1)
        yield "  " + ET.tostring(question, encoding="unicode") + "\n"
    yield "</quiz>\n"
