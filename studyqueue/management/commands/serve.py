"""Run the whole product: the admin web site (gunicorn, static files by WhiteNoise) and the
consumer, together; Ctrl-C or SIGTERM stops both, the consumer gracefully."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from studyqueue.consumer import Consumer
from studyqueue.management.commands._options import bounded_int
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.scheduler import ScheduledConsumer

logger = logging.getLogger("studyqueue.serve")

SUPERUSER_ENV = ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD")


def wsgi_target() -> str:
    """``module:attribute`` of the project's WSGI application, as gunicorn takes it."""
    app = getattr(settings, "WSGI_APPLICATION", None)
    if not app or "." not in app:
        raise CommandError("settings.WSGI_APPLICATION must name the WSGI application")
    module, attribute = app.rsplit(".", 1)
    return f"{module}:{attribute}"


def browsable(bind: str) -> str:
    """The host:port to open in a browser for a bind address (0.0.0.0 is not one)."""
    host, _, port = bind.rpartition(":")
    return f"localhost:{port}" if host in ("0.0.0.0", "[::]", "") else bind


class Command(BaseCommand):
    help = "Serve the admin (gunicorn) and run the consumer together until Ctrl-C or SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind",
            default=os.environ.get("STUDYQUEUE_BIND", "127.0.0.1:8000"),
            help="address:port of the web site (default: %(default)s, or $STUDYQUEUE_BIND)",
        )
        parser.add_argument(
            "--web-workers",
            type=bounded_int(1, 64),
            default=2,
            help="gunicorn worker processes (default: %(default)s)",
        )

    def handle(self, *args: Any, bind: str, web_workers: int, **options: Any) -> None:
        # Before the signal handlers: Ctrl-C at the account prompt cancels as usual.
        call_command("collectstatic", interactive=False, verbosity=0)
        account = self._operator_account()
        with Consumer() as consumer, stop_on_signals(consumer.request_stop):
            web = subprocess.Popen(
                [
                    sys.executable, "-m", "gunicorn", wsgi_target(),
                    "--bind", bind,
                    "--workers", str(web_workers),
                    "--graceful-timeout", "10",
                    "--log-level", "warning",
                ],
            )  # fmt: skip
            web_failed = threading.Event()
            watcher = threading.Thread(
                target=self._watch_web, args=(web, consumer, web_failed), daemon=True
            )
            watcher.start()
            try:
                self.stdout.write(f"Admin: http://{browsable(bind)}/admin/ ({account})")
                self.stdout.flush()
                ScheduledConsumer(consumer).run(self._announce)
            finally:
                consumer.request_stop()
                if web.poll() is None:
                    web.send_signal(signal.SIGTERM)
                web.wait(timeout=30)
        if web_failed.is_set():
            raise CommandError(f"the web server stopped with exit code {web.returncode}")

    def _announce(self, line: str) -> None:
        self.stdout.write(f"{line} Ctrl-C stops the site and the consumer.")
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
        name = os.environ.get(SUPERUSER_ENV[0], "")
        if name and os.environ.get(SUPERUSER_ENV[1]):
            if not users.objects.filter(**{users.USERNAME_FIELD: name}).exists():
                call_command("createsuperuser", interactive=False, verbosity=0)
            return f"log in as {name!r}"
        if users.objects.filter(is_superuser=True).exists():
            return "log in with your operator account"
        if sys.stdin.isatty():
            self.stdout.write("No operator account yet: create one to log in to the admin.")
            call_command("createsuperuser")
            return "log in with the account you just created"
        return (
            "no operator account yet: run 'manage.py createsuperuser', or set "
            "DJANGO_SUPERUSER_USERNAME and DJANGO_SUPERUSER_PASSWORD and start again"
        )
