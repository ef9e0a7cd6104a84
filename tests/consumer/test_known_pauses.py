"""What a consumer knows of the pauses: notices, reads, and a notice that races a read."""

from __future__ import annotations

from studyqueue.consumer.consumer import KnownPauses, is_paused


def test_a_notice_names_its_kind_and_every_kind_names_all():
    pauses = KnownPauses()
    assert not is_paused("explanation", pauses.kinds)
    pauses.noticed("explanation")
    assert is_paused("explanation", pauses.kinds)
    assert not is_paused("session_summary", pauses.kinds)
    pauses.noticed("")
    assert is_paused("session_summary", pauses.kinds)


def test_a_read_replaces_what_was_known_a_lifted_pause_included():
    pauses = KnownPauses()
    pauses.noticed("explanation")
    pauses.read([], started=pauses.reading())
    assert pauses.kinds == frozenset()
    pauses.read(["session_summary"], started=pauses.reading())
    assert pauses.kinds == {"session_summary"}


def test_a_notice_during_a_read_survives_it():
    """The read may have run before the pause committed: it must not erase the notice."""
    pauses = KnownPauses()
    started = pauses.reading()
    pauses.noticed("explanation")
    pauses.read([], started=started)
    assert is_paused("explanation", pauses.kinds)
