"""Health checks: liveness (``/studyqueue/healthz``) is a ``SELECT 1``; readiness
(``/studyqueue/readyz``, ``manage.py studyqueue_health``) is the database (migrated), a
consumer that ran a cycle lately, and the LLM servers the consumers use. Details never carry a
secret: URLs are shown redacted, and every probe goes through the LLM client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.core.management import call_command
from django.db import DatabaseError, connections
from django.utils.translation import gettext, ngettext

from studyqueue import times
from studyqueue.conf import conf
from studyqueue.exceptions import SettingsError
from studyqueue.models import QueueConsumer, StudyQuestionJob, width
from studyqueue.queue import pg, presence
from studyqueue.services import endpoints, llm
from studyqueue.services.llm import PROBE_DEADLINE_SECONDS, Probe, probe_servers
from studyqueue.services.redact import REDACTED, is_valid_api_key

CHECKS = ("db", "consumer", "llm")
MAX_PROBED_URLS = 5  # distinct consumer URLs probed at once; more are named, not probed
# readyz answers from a probe this young; an older one (up to STALE_SECONDS) at once while a
# new probe runs in the background; with none, it waits READY_WAIT_SECONDS for one: a slow LLM
# server never holds a web worker (which healthz may wait for) for the probe's deadline.
FRESH_SECONDS = 5.0
STALE_SECONDS = 60.0
READY_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class Check:
    """One check's answer: ok, and a one-line reason."""

    name: str
    ok: bool
    detail: str


def check_db(*, migrated: bool = True) -> Check:
    """The database answers ``SELECT 1`` and (``migrated``) every migration is applied."""
    db = StudyQuestionJob.objects.all().db  # studyqueue's database, as every query's
    try:
        with connections[db].cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        detail = gettext("the database does not answer (%(error)s)")
        return Check("db", False, detail % {"error": type(exc).__name__})
    if not migrated:
        return Check("db", True, gettext("the database answers"))
    try:
        call_command("migrate", check_unapplied=True, verbosity=0, database=db)
    except SystemExit:  # migrate --check's documented way to say "unapplied migrations"
        return Check("db", False, gettext("migrations are not applied (run manage.py migrate)"))
    answers = gettext("the database answers and is migrated")
    return Check("db", True, "; ".join([answers, *_listen_session(db)]))


def _listen_session(db: str) -> list[str]:
    """With ``DIRECT_DATABASE_URL``: a note when its session does not answer (no failure)."""
    if pg.mode(db) is not pg.Mode.DIRECT:
        return []
    try:
        with pg.connect(pg.direct_settings(), connect_timeout=2):
            return []
    except (psycopg.Error, SettingsError) as exc:
        detail = gettext(
            "DIRECT_DATABASE_URL does not answer (%(error)s): no NOTIFY wakes the consumers, "
            "they look for work each second"
        )
        return [detail % {"error": type(exc).__name__}]


def check_consumer() -> Check:
    """At least one consumer ran a cycle within two of its intervals."""
    try:
        live = presence.live_consumers()
    except DatabaseError as exc:
        detail = gettext("cannot read the consumers (%(error)s)")
        return Check("consumer", False, detail % {"error": type(exc).__name__})
    if not live:
        return Check("consumer", False, gettext("no consumer has run a cycle within two intervals"))
    names = ", ".join(c.record.worker_id for c in live[:5])
    detail = ngettext(
        "%(count)d consumer live: %(names)s", "%(count)d consumers live: %(names)s", len(live)
    )
    return Check("consumer", True, detail % {"count": len(live), "names": names})


@dataclass(frozen=True)
class LLMTarget:
    """One LLM server to check, and whose it is."""

    shown: str  # the URL with its credentials redacted, as consumers record it
    who: str  # the consumers that use it, or this process when none is live
    url: str = ""  # what to connect to; empty: not probed from here
    api_key: str = ""
    keyless: bool = False  # another URL than this process's own: its key is not sent there
    breaker_open_since: str = ""  # for a URL not probed: what its consumers report
    key_invalid: bool = False  # this process's own URL, with a key it never sends


def _who(worker_ids: list[str]) -> str:
    shown = ", ".join(worker_ids[:3])
    if len(worker_ids) > 3:
        shown += gettext(" and %(count)d more") % {"count": len(worker_ids) - 3}
    return ngettext("consumer %(ids)s", "consumers %(ids)s", len(worker_ids)) % {"ids": shown}


def _down_since(records: list[QueueConsumer], shown: str) -> str:
    """Since when a consumer of the server at ``shown`` reports it down ("": none does)."""
    name = endpoints.endpoint_name(shown)
    since: list[datetime | None] = []
    for record in records:
        states = [e for e in presence.reported_endpoints(record) if e["name"] == name]
        if not states and record.breaker_open:
            since.append(record.breaker_since)
        since += [_parsed(state.get("since")) for state in states if state.get("state") == "down"]
    opened = min((s for s in since if s is not None), default=None)
    return times.shown(opened) if opened else ("?" if since else "")


def _parsed(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _urls_of(record: QueueConsumer, own: list[endpoints.Endpoint]) -> list[str]:
    """The URLs (credentials redacted) of the servers a live consumer uses: as it reported
    each, else from ``llm_url`` (docs/howto/several-servers.md, "See them": a cut last URL)."""
    reported = [e.get("url") for e in presence.reported_endpoints(record)]
    urls = [url.strip() for url in reported if isinstance(url, str) and url.strip()]
    if urls:
        return urls
    pieces = [url.strip() for url in record.llm_url.split(",") if url.strip()]
    if pieces and len(record.llm_url) >= width(QueueConsumer, "llm_url"):
        cut = pieces.pop()
        pieces += [e.shown_url for e in own if e.shown_url.startswith(cut)][:1]
    return pieces


def llm_targets() -> list[LLMTarget]:
    """The LLM servers the live consumers report (else this process's own), each with how it
    can be probed from here: with this process's URL and key where the redacted URLs match,
    without a key on another URL (a key only goes to its own URL), not at all on another URL
    whose credentials were redacted (its consumers' reports speak for it)."""
    own = endpoints.configured()

    def own_target(endpoint: endpoints.Endpoint, shown: str, who: str) -> LLMTarget:
        # An invalid key is never sent: the URL is named, not probed (the client refuses too).
        if not is_valid_api_key(endpoint.api_key):
            return LLMTarget(shown, who, key_invalid=True)
        return LLMTarget(shown, who, endpoint.url, endpoint.api_key)

    try:
        live = [c.record for c in presence.live_consumers()]
    except DatabaseError:
        live = []
    if not live:
        who = gettext("this process's LLM_URL; no consumer is live")
        return [own_target(e, e.shown_url, who) for e in own]
    by_url: dict[str, list[QueueConsumer]] = {}
    for record in live:
        for url in _urls_of(record, own):
            by_url.setdefault(url.rstrip("/"), []).append(record)
    targets = []
    for shown, records in sorted(by_url.items()):
        who = _who([r.worker_id for r in records])
        mine = next((e for e in own if e.shown_url.rstrip("/") == shown), None)
        if mine is not None:
            targets.append(own_target(mine, shown, who))
        elif REDACTED not in shown:
            targets.append(LLMTarget(shown, who, shown, "", keyless=True))
        else:
            targets.append(LLMTarget(shown, who, breaker_open_since=_down_since(records, shown)))
    return targets


def _probe_key(target: LLMTarget) -> tuple[str, str, bool]:
    return (target.url, target.api_key, target.keyless)


def _judge(target: LLMTarget, probe: Probe | None) -> tuple[bool, str]:
    """Whether ``target`` is fine, and the one-line reason, from its probe (None: not probed)."""
    at = {"url": target.shown, "who": target.who}
    if target.key_invalid:
        text = gettext("the LLM server at %(url)s (%(who)s) is not probed: %(error)s")
        return False, text % {**at, "error": llm.invalid_key_message()}
    if probe is None and target.url:
        text = gettext("the LLM server at %(url)s (%(who)s) is not probed: too many URLs")
        return True, text % at
    if probe is None and target.breaker_open_since:
        text = gettext(
            "the LLM server at %(url)s (%(who)s) is not probed from here (its credentials "
            "are not this process's); its consumer reports the LLM unreachable since %(since)s"
        )
        return False, text % {**at, "since": target.breaker_open_since}
    if probe is None:
        text = gettext(
            "the LLM server at %(url)s (%(who)s) is not probed from here (its credentials are "
            "not this process's); its consumer reports no failure"
        )
        return True, text % at
    if probe.status is None:
        text = gettext("the LLM server at %(url)s (%(who)s) is unreachable: %(error)s")
        return False, text % {**at, "error": probe.detail}
    if probe.status == 200 and probe.models is not None:
        text = ngettext(
            "the LLM server at %(url)s (%(who)s) serves %(count)d model",
            "the LLM server at %(url)s (%(who)s) serves %(count)d models",
            probe.models,
        ) % {**at, "count": probe.models}
        return True, f"{text} ({probe.detail})" if probe.detail else text
    if probe.status in (401, 403) and target.keyless:
        text = gettext(
            "the LLM server at %(url)s (%(who)s) answers, asking for a key (HTTP %(status)d); "
            "this process's key is for its own LLM_URL and is not sent there"
        )
        return True, text % {**at, "status": probe.status}
    if probe.status in (401, 403):
        text = gettext("the LLM server at %(url)s (%(who)s) refused LLM_API_KEY (HTTP %(status)d)")
        return False, text % {**at, "status": probe.status}
    text = gettext(
        "the LLM server at %(url)s (%(who)s) answered HTTP %(status)d without a model list"
    )
    text %= {**at, "status": probe.status}
    return False, f"{text} ({probe.detail})" if probe.detail and probe.status == 200 else text


def _probe(targets: list[LLMTarget]) -> dict[tuple[str, str, bool], Probe]:
    """Probe every probeable target at once, within the probe deadline."""
    keys = list(dict.fromkeys(_probe_key(t) for t in targets if t.url))[:MAX_PROBED_URLS]
    probes = probe_servers(
        [(url, key) for url, key, _ in keys],
        connect_timeout=min(conf.LLM_CONNECT_TIMEOUT_SECONDS, PROBE_DEADLINE_SECONDS),
    )
    return dict(zip(keys, probes, strict=True))


class _ProbeCache:
    """readyz's probes, per set of URLs: one at a time, in a thread of their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[tuple, tuple[float, dict]] = {}
        self._running: dict[tuple, threading.Event] = {}

    def get(
        self, targets: list[LLMTarget], wait: float
    ) -> tuple[dict[tuple[str, str, bool], Probe] | None, float]:
        """The probes of ``targets`` and their age in seconds; None: none within ``wait``."""
        key = tuple(sorted({_probe_key(t) for t in targets if t.url}))
        with self._lock:
            result = self._result(key)
            if result and result[1] < FRESH_SECONDS:
                return result
            done = self._running.get(key)
            if done is None:
                done = self._running[key] = threading.Event()
                args = (key, targets, done)
                threading.Thread(
                    target=self._run, args=args, name="studyqueue-probe", daemon=True
                ).start()
            if result:
                return result
        done.wait(wait)
        with self._lock:
            return self._result(key) or (None, 0.0)

    def _result(self, key: tuple) -> tuple[dict, float] | None:
        found = self._results.get(key)
        age = time.monotonic() - found[0] if found else STALE_SECONDS
        return (found[1], age) if found and age < STALE_SECONDS else None

    def _run(self, key: tuple, targets: list[LLMTarget], done: threading.Event) -> None:
        try:
            probes = _probe(targets)
        except Exception as exc:  # reported as the probe result
            probes = {k: Probe(None, None, type(exc).__name__) for k in key}
        with self._lock:
            now = time.monotonic()
            self._results = {k: v for k, v in self._results.items() if now - v[0] < STALE_SECONDS}
            self._results[key] = (now, probes)
            del self._running[key]
        done.set()


_cache = _ProbeCache()


def check_llm(*, wait: float | None = None) -> Check:
    """The LLM servers of the live consumers (else this process's) answer ``GET /models``.
    ``wait``: reuse a fresh probe, wait at most that long for a new one (readyz); None: probe
    now."""
    targets = llm_targets()
    probes, age = (_probe(targets), 0.0) if wait is None else _cache.get(targets, wait)
    if probes is None:  # no probe within ``wait``
        text = gettext(
            "the LLM servers are being probed (no answer within %(wait)gs; a probe gives up "
            "after %(deadline)gs): not ready yet"
        )
        return Check("llm", False, text % {"wait": wait, "deadline": PROBE_DEADLINE_SECONDS})
    verdicts = [_judge(target, probes.get(_probe_key(target))) for target in targets]
    detail = "; ".join(text for _, text in verdicts)
    if age >= FRESH_SECONDS:
        detail += gettext(" (as of %(age)ds ago; a new probe is running)") % {"age": age}
    return Check("llm", all(ok for ok, _ in verdicts), detail)


def _guarded(name: str, func: Callable[[], Check]) -> Check:
    """``func()``, or a failed check naming the exception's type (its text may hold a secret)."""
    try:
        return func()
    except Exception as exc:  # reported, never raised
        detail = gettext("the check itself failed (%(error)s)")
        return Check(name, False, detail % {"error": type(exc).__name__})


def run_checks(names: tuple[str, ...] = CHECKS, *, llm_wait: float | None = None) -> list[Check]:
    """The named checks, in ``CHECKS`` order (``llm_wait``: see ``check_llm``)."""
    funcs: dict[str, Callable[[], Check]] = {
        "db": check_db,
        "consumer": check_consumer,
        "llm": lambda: check_llm(wait=llm_wait),
    }
    return [_guarded(name, funcs[name]) for name in CHECKS if name in names]


def liveness() -> list[Check]:
    """healthz: the database answers; nothing that could wait on a migration or the LLM."""
    return [_guarded("db", lambda: check_db(migrated=False))]
