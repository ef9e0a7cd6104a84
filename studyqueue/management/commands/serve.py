"""Run the whole product: the admin web site (gunicorn, static files by WhiteNoise) and the
consumer, together; Ctrl-C, SIGTERM, SIGHUP (the terminal closed) or any other stop signal
stops both, the consumer gracefully."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.db import models
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue import views
from studyqueue.consumer.consumer import Consumer
from studyqueue.consumer.scheduler import ScheduledConsumer
from studyqueue.management.commands import _serve_needs, _web
from studyqueue.management.commands._options import bounded_int
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.services import endpoints
from studyqueue.services.llm import Probe, probe_servers, wrong_path_message
from studyqueue.services.redact import without_credentials

logger = logging.getLogger("studyqueue.serve")

SUPERUSER_ENV = ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD")
WEB_STOP_SECONDS = 30  # gunicorn's graceful timeout (10 s) and then some
# After gunicorn's master: how long what is left of its process group (SIGKILLed) may take
# to be gone before serve gives up waiting and says so.
WEB_LEFTOVER_SECONDS = 10
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# The start-up look at the LLM server: short, so that a server that hangs delays nothing.
LLM_PROBE_SECONDS = 1.0
W005 = "studyqueue.W005"  # the system check that says a URL's path is wrong, at length


def wsgi_target() -> str:
    """``module:attribute`` of the project's WSGI application, as gunicorn takes it."""
    app = getattr(settings, "WSGI_APPLICATION", None)
    if not app or "." not in app:
        raise CommandError(_("settings.WSGI_APPLICATION must name the WSGI application"))
    return ":".join(app.rsplit(".", 1))


def bind_host(bind: str) -> str | None:
    """The host a bind address listens on (``""``: every interface; None: a Unix socket or a
    descriptor); ``CommandError`` for a malformed one."""
    address = bind.strip()
    if address.startswith(("unix:", "fd://")):
        return None
    address = address.removeprefix("tcp://")
    if address.startswith("["):
        host, closed, rest = address[1:].partition("]")
        port = rest.removeprefix(":") if closed and rest.startswith(":") else None
        if not closed or (rest and port is None):
            raise CommandError(
                _("--bind %(bind)r is not HOST:PORT or [IPv6]:PORT") % {"bind": bind}
            )
    elif address.count(":") > 1:
        raise CommandError(
            _("--bind %(bind)r: write an IPv6 address in brackets, e.g. [::1]:8000")
            % {"bind": bind}
        )
    else:
        host, _sep, port = address.partition(":")
    if port and not (port.isdecimal() and int(port) <= 65535):
        raise CommandError(_("--bind %(bind)r: the port must be 0 to 65535") % {"bind": bind})
    return host.lower()


def is_local(bind: str) -> bool:
    """Whether only this machine can reach the bind address: localhost or a loopback IP."""
    host = bind_host(bind) or ""  # "" (every interface) is no address: a ValueError
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_taken(bind: str) -> bool:
    """Whether another process already listens on the bind address's TCP port."""
    host = bind_host(bind)
    _host, _sep, port = bind.rpartition(":")
    if host is None or not port.isdecimal() or int(port) == 0:
        return False  # a Unix socket, an inherited descriptor, any free port: nothing to ask
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError:
        return False  # a name that does not resolve: gunicorn says so itself
    with socket.socket(family, kind, proto) as probe:
        # As gunicorn binds: a port left in TIME_WAIT by a stopped server is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def api_line(site: str) -> str:
    """Whether the sessions API is on (STUDYQUEUE_API_TOKENS), and where: a start-up line."""
    if not views.api_tokens():
        return str(views.API_OFF)
    return _("Sessions API: on at %(url)s.") % {"url": f"http://{site}/studyqueue/api/sessions"}


def has_builtin_secret_key() -> bool:
    """The SECRET_KEY is the project's published development key (or Django's template's)."""
    key = settings.SECRET_KEY
    return key == getattr(settings, "DEVELOPMENT_SECRET_KEY", None) or str(key).startswith(
        "django-insecure-"
    )


def _adopt_orphans() -> None:
    """Linux: reap this process's orphaned descendants, so that ``_end_group`` can wait for them."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        logger.debug("study_web_server_subreaper_unavailable")


def _end_group(group: int) -> None:
    """Kill and reap what gunicorn's group left after its master (a worker may hold the port)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)  # nothing of it should outlive the master
    deadline = time.monotonic() + WEB_LEFTOVER_SECONDS
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-group, os.WNOHANG)[0]:  # reap the ones that became ours
                pass
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return  # no process of the group left
        if time.monotonic() > deadline:
            logger.error(
                "study_web_server_leftover group=%s after_s=%s", group, WEB_LEFTOVER_SECONDS
            )
            return
        time.sleep(0.01)  # a SIGKILLed process is gone within milliseconds


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Serve the admin (gunicorn) and run the consumer together until Ctrl-C or SIGTERM."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind",
            default=os.environ.get("STUDYQUEUE_BIND", "127.0.0.1:8000"),
            help=_(
                "address:port of the web site, or a port alone for 127.0.0.1 (default: "
                "%(default)s, or $STUDYQUEUE_BIND)"
            ),
        )
        parser.add_argument(
            "--web-workers",
            type=bounded_int(1, 64),
            default=2,
            help=_("gunicorn worker processes (default: %(default)s)"),
        )

    def handle(self, *args: Any, bind: str, web_workers: int, **options: Any) -> None:
        bind = bind.strip()
        bind = f"127.0.0.1:{bind}" if bind.isdecimal() else bind  # a port alone: local
        if not is_local(bind) and has_builtin_secret_key():
            # The published key signs sessions and password resets: anyone who can reach
            # the port (sending "Host: localhost" passes ALLOWED_HOSTS) could forge them.
            raise CommandError(
                _(
                    "refusing to serve on %(bind)s with the built-in development SECRET_KEY: "
                    "set SECRET_KEY (and ALLOWED_HOSTS) to serve beyond this machine, or "
                    "bind to 127.0.0.1"
                )
                % {"bind": bind}
            )
        if port_taken(bind):
            # Checked before the consumer starts: gunicorn would fail only after it had
            # started, and the start-up lines named a site that is another program's.
            raise CommandError(
                _(
                    "%(bind)s is already in use (another make run, or another program): stop "
                    "it, or choose another port, e.g. STUDYQUEUE_BIND=8001"
                )
                % {"bind": bind}
            )
        gaps = _serve_needs.missing()
        if gaps:
            raise CommandError(
                _(
                    "serve needs in your settings: %(gaps)s (the manual: "
                    "docs/howto/install.md, Install into an existing Django project)"
                )
                % {"gaps": "; ".join(gaps)}
            )
        # Asked while the static files are collected: the answer waits for nobody.
        # With the system checks run, studyqueue.W005 has said what a wrong URL path is.
        checked = not options["skip_checks"] and W005 not in settings.SILENCED_SYSTEM_CHECKS
        probe = _LLMProbe(said_wrong_path=checked)
        # Before the signal handlers: Ctrl-C at the account prompt cancels as usual.
        call_command("collectstatic", interactive=False, verbosity=0)
        account = self._operator_account()
        host, _sep, port = bind.rpartition(":")  # 0.0.0.0 is no address to browse to
        site = f"localhost:{port}" if host in ("0.0.0.0", "[::]", "") else bind
        web: subprocess.Popen | None = None

        def stop() -> None:
            consumer.request_stop()
            if web is not None and web.poll() is None:
                web.terminate()  # SIGTERM: gunicorn finishes its requests and exits

        _adopt_orphans()  # gunicorn's workers, should its master exit first (_end_group)
        with Consumer() as consumer, stop_on_signals(stop), self._parent_pipe() as pipe_fd:
            web = subprocess.Popen(
                [
                    sys.executable, "-m", "gunicorn", wsgi_target(),
                    "--config", f"python:{_web.__name__}",
                    "--bind", bind,
                    "--workers", str(web_workers),
                    "--graceful-timeout", "10",
                    "--log-level", "warning",
                ],
                env={**os.environ, _web.PARENT_PIPE_ENV: str(pipe_fd)},
                pass_fds=(pipe_fd,),
                # Its own session: the terminal's SIGHUP/SIGINT reach serve alone, which
                # stops gunicorn with SIGTERM (gunicorn takes SIGHUP as "reload").
                start_new_session=True,
            )  # fmt: skip
            web_failed = threading.Event()
            threading.Thread(
                target=self._watch_web, args=(web, consumer, web_failed), daemon=True
            ).start()
            try:
                self.stdout.write(
                    _("Admin: %(url)s (%(account)s)")
                    % {"url": f"http://{site}/admin/", "account": account}
                )
                self.stdout.write(api_line(site))
                self.stdout.write(probe.line())
                self.stdout.flush()
                ScheduledConsumer(consumer).run(self._announce)
            finally:
                stop()
                self._wait_web(web)
        if web_failed.is_set():
            raise CommandError(
                _("the web server stopped with exit code %(code)s") % {"code": web.returncode}
            )

    @contextlib.contextmanager
    def _parent_pipe(self) -> Iterator[int]:
        """A pipe whose write end only this process holds (``_web``)."""
        read_fd, write_fd = os.pipe()
        try:
            yield read_fd
        finally:
            os.close(read_fd)
            os.close(write_fd)

    def _wait_web(self, web: subprocess.Popen) -> None:
        try:
            web.wait(timeout=WEB_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            logger.error("study_web_server_kill after_s=%s", WEB_STOP_SECONDS)
            os.killpg(web.pid, signal.SIGKILL)  # gunicorn and its workers (its own group)
            web.wait()
        _end_group(web.pid)

    def _announce(self, line: str) -> None:
        self.stdout.write(line + " " + _("Ctrl-C stops the site and the consumer."))
        self.stdout.flush()

    def _watch_web(
        self, web: subprocess.Popen, consumer: Consumer, failed: threading.Event
    ) -> None:
        # The web server could not start (address in use) or died: stop the consumer
        # too, so that the command ends instead of running half a product.
        web.wait()
        if not consumer.stopping():
            failed.set()
            logger.error("study_web_server_exited code=%s; stopping", web.returncode)
            consumer.request_stop()

    def _operator_account(self) -> str:
        """Make sure someone can log in; how, in words for the start-up line."""
        users = get_user_model()
        name, password = (os.environ.get(variable, "") for variable in SUPERUSER_ENV)
        if name and password:
            user = users._default_manager.filter(**{users.USERNAME_FIELD: name}).first()
            if user is None:
                self._create_superuser(name, password)
            elif not (user.is_active and user.is_staff):
                # Never promoted behind the operator's back: say why the login will fail.
                return _(
                    "user %(name)r exists but is not an active staff member, so it cannot "
                    "log in to the admin: give it staff status, or set "
                    "DJANGO_SUPERUSER_USERNAME to another name"
                ) % {"name": name}
            return _("log in as %(name)r") % {"name": name}
        if users.objects.filter(is_superuser=True).exists():
            return _("log in with your operator account")
        if sys.stdin.isatty():
            self.stdout.write(_("No operator account yet: create one to log in to the admin."))
            call_command("createsuperuser")
            return _("log in with the account you just created")
        return _(
            "no operator account yet: run 'manage.py createsuperuser', or set "
            "DJANGO_SUPERUSER_USERNAME and DJANGO_SUPERUSER_PASSWORD and start again"
        )

    def _create_superuser(self, name: str, password: str) -> None:
        """The account from Django's DJANGO_SUPERUSER_* variables (a field with none stays
        blank where it may)."""
        users = get_user_model()
        fields: dict[str, Any] = {}
        for field_name in (users.USERNAME_FIELD, *users.REQUIRED_FIELDS):
            field = users._meta.get_field(field_name)
            assert isinstance(field, models.Field)
            value = name if field_name == users.USERNAME_FIELD else ""
            value = value or os.environ.get(f"DJANGO_SUPERUSER_{field_name.upper()}", "")
            if not value and not field.blank:
                raise CommandError(
                    _("set DJANGO_SUPERUSER_%(field)s to create the operator account")
                    % {"field": field_name.upper()}
                )
            try:
                fields[field_name] = field.clean(value, None) if value else value
            except ValidationError as exc:
                raise CommandError(
                    _("DJANGO_SUPERUSER_%(field)s is not valid: %(reason)s")
                    % {"field": field_name.upper(), "reason": " ".join(exc.messages)}
                ) from None
        users._default_manager.create_superuser(password=password, **fields)


class _LLMProbe:
    """One look at each LLM server at start-up, in a thread (at most ``LLM_PROBE_SECONDS``)."""

    def __init__(self, *, said_wrong_path: bool) -> None:
        self.said_wrong_path = said_wrong_path
        self.endpoints = endpoints.configured()
        self._probes: list[Probe | None] = [None] * len(self.endpoints)
        self._thread = threading.Thread(target=self._run, name="llm-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._probes = list(
                probe_servers(
                    [(e.url, e.api_key) for e in self.endpoints], deadline=LLM_PROBE_SECONDS
                )
            )
        except Exception as exc:  # a look, never a reason not to start
            logger.warning("study_llm_probe_failed error=%s", type(exc).__name__)

    def line(self) -> str:
        """The start-up lines: each server answers, or what it did instead."""
        self._thread.join(timeout=LLM_PROBE_SECONDS + 0.5)
        alone = len(self.endpoints) == 1
        return "\n".join(
            self._line(without_credentials(endpoint.url), probe, alone=alone)
            for endpoint, probe in zip(self.endpoints, self._probes, strict=True)
        )

    def _line(self, url: str, probe: Probe | None, *, alone: bool) -> str:
        if probe is not None and probe.chat_path_missing:
            logger.warning("study_llm_probe url=%s answered=yes chat_path=404", url)
            if not self.said_wrong_path:
                return wrong_path_message(url)
            return _(
                "LLM server: %(url)s answers, but not where the calls go: see %(check)s above."
            ) % {"url": url, "check": W005}
        if probe is not None and probe.status is not None:  # any HTTP answer: it is up
            logger.info("study_llm_probe url=%s answered=yes", url)
            return _("LLM server: %(url)s answers.") % {"url": url}
        detail = probe.detail if probe is not None else ""
        logger.warning("study_llm_probe url=%s answered=no detail=%r", url, detail)
        values = {
            "url": url,
            "detail": detail or _("no answer within %(s)s s") % {"s": f"{LLM_PROBE_SECONDS:g}"},
        }
        message = (
            _(
                "LLM server: no answer at %(url)s (%(detail)s); jobs wait until it answers. "
                "Start it, or set STUDYQUEUE_LLM_URL."
            )
            if alone
            else _(
                "LLM server: no answer at %(url)s (%(detail)s); the other servers take the jobs "
                "until it answers."
            )
        )
        return message % values
