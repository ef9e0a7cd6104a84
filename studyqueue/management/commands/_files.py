"""What the import and export commands share: a file (or standard input) read as text, the
report of its bad lines, a progress bar; an export written to a file or standard output."""

from __future__ import annotations

import codecs
import io
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import IO, Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.utils.translation import gettext as _
from tqdm import tqdm

from studyqueue.explanations import export, transfer

SHOWN_ERRORS = 50
KOREAN_WINDOWS = "cp949"
SNIFF_BYTES = 64 * 1024  # what tells UTF-8 from CP949: the first Korean text is enough


@contextmanager
def reading(file: str) -> Iterator[TextIO]:
    """``file`` (``-``: standard input) as text (``_decoded``); what cannot be read, a
    ``CommandError``."""
    try:
        if file == "-" and not hasattr(sys.stdin, "buffer"):
            yield sys.stdin  # already text (a test's StringIO)
        elif file == "-":
            stdin = _decoded(cast(io.BufferedReader, sys.stdin.buffer))
            try:
                yield stdin
            finally:
                stdin.detach()  # standard input stays open
        else:
            with Path(file).open("rb") as binary, _decoded(binary) as text:
                yield text
    except OSError as exc:
        raise CommandError(cannot_read(file, exc.strerror or exc)) from None
    except transfer.FileError as exc:
        raise CommandError(
            _("%(file)s, %(error)s; nothing imported") % {"file": file, "error": exc}
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandError(cannot_read(file, exc)) from None


def _decoded(binary: io.BufferedReader) -> io.TextIOWrapper:
    """UTF-8 (a byte order mark dropped), or CP949 when the first bytes are not UTF-8 but
    are CP949 (Korean Windows: what Excel saves as "CSV"). Bytes that neither reads become
    lone surrogates, which the row they stand in reports."""
    head = binary.peek(SNIFF_BYTES)[:SNIFF_BYTES]
    for encoding in ("utf-8-sig", KOREAN_WINDOWS, "utf-8-sig"):  # neither: UTF-8, as said
        with suppress(UnicodeDecodeError):  # a character cut at the end is no error
            codecs.getincrementaldecoder(encoding)().decode(head)
            break
    return io.TextIOWrapper(binary, encoding=encoding, errors="surrogateescape", newline="")


def cannot_read(file: str, reason: object) -> str:
    return _("cannot read %(file)s: %(reason)s") % {"file": file, "reason": reason}


def bad_rows(message: str, errors: Sequence[tuple[int | str, str]], valid: int = 0) -> str:
    """``message`` (``%(invalid)s``: how many ``errors``; ``%(valid)s``), then the bad rows,
    one a line (the first ``SHOWN_ERRORS``), indented."""
    lines = [message % {"invalid": len(errors), "valid": valid}]
    lines += [f"  {transfer.at(where)}: {reason}" for where, reason in errors[:SHOWN_ERRORS]]
    if len(errors) > SHOWN_ERRORS:
        lines.append("  " + _("… and %(count)s more") % {"count": len(errors) - SHOWN_ERRORS})
    return "\n".join(lines)


def progress(stderr: OutputWrapper, total: int, done_of: str) -> Callable[[int], None]:
    """A progress bar on a terminal; otherwise the line ``done_of`` (with ``%(done)s`` and
    ``%(total)s``) every few seconds."""
    if stderr.isatty():
        bar = tqdm(total=total, unit="row", file=sys.stderr, leave=False)
        return bar.update
    state = {"done": 0, "at": time.monotonic()}

    def line(n: int) -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["at"] >= 5 or state["done"] == total:
            stderr.write(done_of % {"done": state["done"], "total": total})
            state["at"] = now

    return line


def exported(
    command: BaseCommand,
    rows: Generator[dict[str, Any]],
    output: str | None,
    fmt: str,
    **options: Any,
) -> int:
    """Write ``rows`` (``export.write``, with its ``options``) to the file ``output``, or the
    command's standard output; how many. What cannot be written (a pipe closed early by
    ``| head``, a full disk) ends the command with one line, never a traceback."""
    # An export that stops early closes its database cursor now, not at exit.
    with closing(rows):
        try:
            if output is not None:
                with Path(output).open("w", encoding="utf-8", newline="") as out:
                    return export.write(rows, out, fmt, **options)
            # The command's own stdout (a TextIOBase), so that call_command can capture it.
            count = export.write(rows, cast(IO[str], command.stdout), fmt, **options)
            command.stdout.flush()
            return count
        except OSError as exc:
            reason = exc.strerror or exc
            if output is not None:
                raise CommandError(
                    _("cannot write %(file)s: %(reason)s") % {"file": output, "reason": reason}
                ) from None
            _discard(command.stdout)
            raise CommandError(
                _("cannot write to standard output: %(reason)s; the export stopped")
                % {"reason": reason}
            ) from None


def _discard(stdout: OutputWrapper) -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what
    could not be written does not fail again at exit with a second error."""
    try:
        descriptor = stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (call_command's StringIO): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)
