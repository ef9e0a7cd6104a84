"""System checks for STUDYQUEUE misconfiguration: each id (studyqueue.E00x / W00x) is
described in docs/reference/settings.md."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.translation import gettext

from studyqueue.conf import AUTO, SETTINGS, SettingNotFinite, SettingOutOfRange, conf
from studyqueue.exceptions import SettingsError
from studyqueue.queue import pg
from studyqueue.services import endpoints
from studyqueue.services.llm import probe_servers, suggested_url, wrong_path_message
from studyqueue.services.redact import is_valid_api_key, without_credentials


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every setting parses and is in range, the servers are usable, timeouts nest sensibly."""
    problems: list[CheckMessage] = []
    for name, spec in SETTINGS.items():
        try:
            getattr(conf, name)
        except SettingNotFinite as exc:
            problems.append(Error(str(exc), id="studyqueue.E005"))
        except SettingOutOfRange as exc:
            also = gettext(" or %(auto)r") % {"auto": AUTO} if spec.auto else ""
            hint = gettext("Allowed: %(range)s (default %(default)s).") % {
                "range": spec.range_text() + also,
                "default": spec.default,
            }
            problems.append(Error(str(exc), hint=hint, id="studyqueue.E002"))
        except SettingsError as exc:
            problems.append(Error(str(exc), id="studyqueue.E001"))
    if problems:
        return problems
    problems += _endpoint_problems() + _pooler_problems()
    problems += _prompt_problems() + _quality_problems() + _webhook_problems() + _token_problems()
    return problems or _cache_problems() + _nesting()


# Variables a new user sets expecting them to work, and the one studyqueue reads instead.
LIKELY_MEANT = {
    "LLM_URL": "STUDYQUEUE_LLM_URL",
    "PORT": "STUDYQUEUE_BIND",
    "BIND": "STUDYQUEUE_BIND",
}


@register()
def check_environment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A likely-meant variable is set but read by nobody (silently ignored, it cost a new
    user an afternoon): say which one is read."""
    problems: list[CheckMessage] = []
    for name, meant in LIKELY_MEANT.items():
        value = os.environ.get(name, "").strip()
        if not value or _honoured(name, value):
            continue
        message = gettext(
            "%(name)s is set in the environment but studyqueue does not read it: "
            "set %(meant)s instead"
        ) % {"name": name, "meant": meant}
        hint = gettext("docs/reference/settings.md lists every variable.")
        problems.append(Warning(message, hint=hint, id="studyqueue.W006"))
    return problems


def _honoured(name: str, value: str) -> bool:
    """Whether the variable's value is in force anyway (mapped by the project, or also given
    the right name)."""
    if name == "LLM_URL":
        try:
            return value == conf.LLM_URL
        except SettingsError:
            return False
    bind = os.environ.get("STUDYQUEUE_BIND", "").strip()
    return bool(bind) and (bind == value or bind.endswith(f":{value}"))


def _prompt_problems() -> list[CheckMessage]:
    """The prompt templates render for a sample question (an error at startup, not per job)."""
    from studyqueue.explanations import prompts  # the models must be ready first
    from studyqueue.sessions import summaries

    try:
        messages = prompts.build_messages(prompts.sample_question())
        prompts.current_version()
        summaries.version()  # the session summary's templates are found
    except Exception as exc:  # TemplateDoesNotExist, TemplateSyntaxError, a failing tag...
        message = gettext("the prompt templates do not render: %(error)s") % {
            "error": f"{type(exc).__name__}: {exc}"
        }
        hint = gettext(
            "Check STUDYQUEUE PROMPT_TEMPLATE, SYSTEM_PROMPT_TEMPLATE and SUMMARY_PROMPT_TEMPLATE."
        )
        return [Error(message, hint=hint, id="studyqueue.E007")]
    if not all(message["content"] for message in messages):
        return [Error(gettext("a prompt template renders empty text"), id="studyqueue.E007")]
    return []


# More fixed text than this in the user message is instructions, not labels.
SHARED_USER_TEXT_LIMIT = 200


def _cache_problems() -> list[CheckMessage]:
    """Fixed text belongs in the system message (the server caches it), the question alone in
    the user message; warnings, since the prompt still works."""
    from studyqueue.explanations import prompts

    layout = prompts.cache_layout()
    found = []
    if layout.shared_user_chars > SHARED_USER_TEXT_LIMIT:
        message = gettext(
            "the user prompts of two different questions share %(chars)d characters "
            "of fixed text: the instructions belong in the system template, where "
            "the LLM server can cache them"
        ) % {"chars": layout.shared_user_chars}
        hint = gettext(
            "Move the role, instructions and output format into "
            "SYSTEM_PROMPT_TEMPLATE; keep only the question, its choices and answer "
            "in PROMPT_TEMPLATE (the manual: docs/howto/prompt.md, Write a prompt the "
            "server can cache)."
        )
        found.append((message, hint))
    if layout.system_varies:
        message = gettext(
            "the system prompt changes with the question: the LLM server cannot "
            "reuse its cache from one question to the next"
        )
        hint = gettext(
            "Keep the question's fields out of SYSTEM_PROMPT_TEMPLATE; they belong "
            "in PROMPT_TEMPLATE (the manual: docs/howto/prompt.md, Write a prompt the "
            "server can cache)."
        )
        found.append((message, hint))
    return [Warning(message, hint=hint, id="studyqueue.W003") for message, hint in found]


def _quality_problems() -> list[CheckMessage]:
    from studyqueue.explanations import revisions

    _, unknown = revisions.parse_flags(conf.QUALITY_RETRY)
    if not unknown:
        return []
    message = gettext("STUDYQUEUE QUALITY_RETRY names unknown flags: %(flags)s") % {
        "flags": ", ".join(sorted(unknown))
    }
    hint = gettext("Known flags: %(flags)s.") % {"flags": ", ".join(revisions.FLAGS)}
    return [Error(message, hint=hint, id="studyqueue.E008")]


def _pooler_problems() -> list[CheckMessage]:
    """How the queue keeps its sessions behind a transaction pooler (``queue.pg.mode``)."""
    from studyqueue.models import StudyQuestionJob  # the models must be ready first

    if conf.DIRECT_DATABASE_URL:
        try:
            pg.direct_settings()
        except SettingsError as exc:
            return [Error(str(exc), id="studyqueue.E010")]
    if pg.mode(StudyQuestionJob.objects.all().db) is not pg.Mode.POOLED:
        return []
    message = gettext(
        "the database is behind a transaction pooler (DISABLE_SERVER_SIDE_CURSORS) "
        "and DIRECT_DATABASE_URL is not set: consumers poll for work each second "
        "instead of listening"
    )
    hint = gettext(
        "Set STUDYQUEUE_DIRECT_DATABASE_URL to a URL that reaches the database "
        "without the pooler, for LISTEN."
    )
    return [Warning(message, hint=hint, id="studyqueue.W004")]


def _endpoint_problems() -> list[CheckMessage]:
    """The endpoint pool parses, and every server's URL and key are usable."""
    try:
        pool = endpoints.configured()
    except SettingsError as exc:
        return [Error(str(exc), id="studyqueue.E009")]
    problems: list[CheckMessage] = []
    for endpoint in pool:
        url_problems = _url_problems(endpoint.url)
        problems += url_problems
        if not is_valid_api_key(endpoint.api_key):
            message = gettext(
                "STUDYQUEUE LLM_API_KEY is invalid: it holds control, space or non-ASCII "
                "characters (a pasted line end?); it cannot be sent in an HTTP header"
            )
            hint = gettext("Set the key exactly as issued, without surrounding white space.")
            problems.append(Error(message, hint=hint, id="studyqueue.E006"))
        if not url_problems:
            problems += _path_problems(endpoint.url, endpoint.api_key)
    return problems


def _path_problems(url: str, key: str) -> list[CheckMessage]:
    """A URL without ``/v1`` whose server answers 404 where the calls go; only such a URL is
    asked (every command runs the checks), and no answer is no problem here."""
    if suggested_url(url) is None:
        return []
    (probe,) = probe_servers([(url, key)])
    if not probe.chat_path_missing:
        return []
    return [Warning(wrong_path_message(without_credentials(url)), id="studyqueue.W005")]


def _url_fault(url: str, scheme: str, parse: str, host: str) -> str | None:
    """What is wrong with an http(s) URL, as the message given for it: ``scheme``, ``parse``
    (``%(error)s``: why) or ``host``; None. The reason never holds the URL (it may hold a
    password, or a token in its path)."""
    if not url.startswith(("http://", "https://")):
        return scheme
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return parse % {"error": exc}
    return None if parts.hostname else host


def _url_problems(url: str) -> list[CheckMessage]:
    scheme = gettext("STUDYQUEUE LLM_URL must start with http:// or https://")
    message = _url_fault(
        url,
        scheme,
        gettext("STUDYQUEUE LLM_URL does not parse: %(error)s"),
        gettext("STUDYQUEUE LLM_URL has no host"),
    )
    if message is None:
        return []
    if message == scheme:
        return [Error(message, id="studyqueue.E003")]
    return [Error(message, id="studyqueue.E004")]


def _webhook_problems() -> list[CheckMessage]:
    """WEBHOOK_URL, when set, is an http(s) URL with a host (else every notice fails)."""
    message = conf.WEBHOOK_URL and _url_fault(
        conf.WEBHOOK_URL,
        gettext("STUDYQUEUE WEBHOOK_URL must start with http:// or https://"),
        gettext("STUDYQUEUE WEBHOOK_URL does not parse: %(error)s"),
        gettext("STUDYQUEUE WEBHOOK_URL has no host"),
    )
    if not message:
        return []
    hint = gettext("For example https://hooks.example.org/studyqueue; empty: no webhook.")
    return [Error(message, hint=hint, id="studyqueue.E011")]


def _token_problems() -> list[CheckMessage]:
    """Every API token can be sent in a header: LLM_API_KEY's rule (E006)."""
    from studyqueue.views import api_tokens  # the models must be ready first

    if all(is_valid_api_key(token) for token in api_tokens()):
        return []
    message = gettext("STUDYQUEUE API_TOKENS holds a token no HTTP header can carry")
    hint = gettext("A token is visible ASCII, without spaces; commas separate the tokens.")
    return [Error(message, hint=hint, id="studyqueue.E012")]


def _nesting() -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    stale_seconds = conf.STALE_MINUTES * 60
    if stale_seconds <= conf.LLM_TIMEOUT_SECONDS:
        message = gettext(
            "LLM_TIMEOUT_SECONDS is not shorter than the stale threshold: a slow but "
            "live call may be reset and run twice."
        )
        hint = gettext("Lower STUDYQUEUE_LLM_TIMEOUT_SECONDS or raise STUDYQUEUE_STALE_MINUTES.")
        problems.append(Warning(message, hint=hint, id="studyqueue.W001"))
    if stale_seconds < conf.HEARTBEAT_SECONDS * 2:
        message = gettext(
            "HEARTBEAT_SECONDS is more than half the stale threshold: one late "
            "heartbeat makes a live job look dead."
        )
        hint = gettext("Keep STUDYQUEUE_HEARTBEAT_SECONDS well under STUDYQUEUE_STALE_MINUTES.")
        problems.append(Warning(message, hint=hint, id="studyqueue.W002"))
    return problems
