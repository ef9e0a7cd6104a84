"""Side by side: removed and added words marked, everything escaped, long texts bounded."""

from __future__ import annotations

from studyqueue.explanations.diff import DIFF_CHARS, side_by_side


def test_words_removed_and_added_are_marked_and_escaped():
    diff = side_by_side(
        "The answer is <b>3</b>.\nSee above.", "The answer is <b>4</b>.\nSee above."
    )
    assert diff.old == "The answer is <del>&lt;b&gt;3&lt;/b&gt;.\n</del>See above."
    assert diff.new == "The answer is <ins>&lt;b&gt;4&lt;/b&gt;.\n</ins>See above."
    assert diff.changed and not diff.cut
    same = side_by_side("정답은 ②번입니다.", "정답은 ②번입니다.")
    assert (same.old, same.changed) == ("정답은 ②번입니다.", False)


def test_only_the_start_of_a_huge_text_is_compared():
    diff = side_by_side("word " * DIFF_CHARS, "word " * DIFF_CHARS + "more")
    assert diff.cut and diff.changed
    assert len(diff.new) <= DIFF_CHARS
