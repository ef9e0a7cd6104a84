"""The app's marked strings as ``makemessages`` extracts them today, and a pseudo-Korean
catalogue built from them: every string "translated" to itself behind a marker, so a test
can tell text that went through gettext from text that did not, before any translation
exists. Both work on a copy: the checkout's catalogue is never touched."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polib

from tests.helpers import ROOT

MARK = "§"  # starts every pseudo-translation


def extract(tmp_path: Path) -> polib.POFile:
    """The catalogue ``makemessages -l ko`` writes for the app's code and templates now."""
    app = tmp_path / "studyqueue"
    shutil.copytree(ROOT / "studyqueue", app, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "makemessages", "-l", "ko", "--no-location"],
        cwd=app,
        check=True,
        capture_output=True,
    )
    return polib.pofile(str(app / "locale" / "ko" / "LC_MESSAGES" / "django.po"))


def pseudo_locale(tmp_path: Path) -> Path:
    """A LOCALE_PATHS directory whose Korean catalogue marks every extracted string."""
    catalogue = extract(tmp_path)
    for entry in catalogue:
        entry.flags = [flag for flag in entry.flags if flag != "fuzzy"]
        if entry.msgid_plural:
            entry.msgstr_plural = {0: MARK + entry.msgid_plural}  # Korean has one form
        else:
            entry.msgstr = MARK + entry.msgid
    locale = tmp_path / "pseudo"
    messages = locale / "ko" / "LC_MESSAGES"
    messages.mkdir(parents=True)
    catalogue.save_as_mofile(str(messages / "django.mo"))
    return locale
