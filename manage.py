#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings module
    except ImproperlyConfigured as exc:
        # A bad environment variable: its one-line reason, not a traceback through Django.
        sys.exit(f"Error: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
