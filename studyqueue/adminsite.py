"""The admin site as operators see it: branded studyqueue, and django-apscheduler's tables
listed for superusers only, last. A project installs ``AdminConfig`` in place of
``django.contrib.admin`` (or keeps Django's site: nothing else depends on it)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig
from django.http import HttpRequest
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

SCHEDULER_APP = "django_apscheduler"
# Django's own msgids our catalogue translates better (studyqueue comes before the admin in
# INSTALLED_APPS, so ours win): the admin's Korean reads "보기위한 1%s 를(을) 선택" and, for a
# page one may only view, "뷰 학습 세션". Named here so that makemessages keeps them in our .po.
DJANGO_MSGIDS = (gettext_noop("Select %s to view"), gettext_noop("View %s"))


class StudyQueueAdminSite(admin.AdminSite):
    """Django's admin site, with the operator's header and app list."""

    site_header = _("studyqueue")
    site_title = _("studyqueue admin")  # the browser tab: "Home | studyqueue admin"

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        apps = super().get_app_list(request, app_label)
        ours = [app for app in apps if app["app_label"] != SCHEDULER_APP]
        if not getattr(request.user, "is_superuser", False):
            return ours
        # The consumer's scheduler keeps its rows there (one job store per consumer): for
        # someone debugging a consumer, not for the day's work. Its names are not
        # translatable (plain strings in django-apscheduler): ours are.
        names = {
            "DjangoJob": gettext("Scheduler jobs"),
            "DjangoJobExecution": gettext("Scheduler job runs"),
        }
        for app in apps:
            if app["app_label"] == SCHEDULER_APP:
                app["name"] = gettext("Scheduler (internal)")
                for model in app["models"]:
                    model["name"] = names.get(model["object_name"], model["name"])
                ours.append(app)
        return ours


class AdminConfig(DjangoAdminConfig):
    """``django.contrib.admin`` with ``StudyQueueAdminSite`` as ``admin.site``."""

    default_site = "studyqueue.adminsite.StudyQueueAdminSite"
