"""The admin site an operator opens first: branded studyqueue (학습 큐), the scheduler's
internal tables for superusers only and last, and our Korean where Django's reads badly."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import translation

from tests.helpers.admin import JOBS_URL, staff

pytestmark = pytest.mark.django_db

INDEX_URL = reverse("admin:index")


@pytest.fixture(autouse=True)
def _no_language_left() -> Iterator[None]:
    """A page asked for in Korean leaves Korean active on this thread (LocaleMiddleware):
    the next test would run in it."""
    yield
    translation.deactivate()


def _sections(page: str) -> list[str]:
    """The app sections of the index, in order, by their captions."""
    return re.findall(r'<caption>\s*<a href="[^"]*" class="section"[^>]*>([^<]+)</a>', page)


def test_the_admin_is_branded_studyqueue_in_either_language(admin_client):
    page = admin_client.get(INDEX_URL).content.decode()
    assert f'<div id="site-name"><a href="{INDEX_URL}">studyqueue</a>' in page
    assert "Django administration" not in page
    korean = admin_client.get(INDEX_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert f'<div id="site-name"><a href="{INDEX_URL}">학습 큐</a>' in korean
    assert "| 학습 큐 관리</title>" in korean and "Django" not in korean


def auth_in_korean() -> str:
    """Django's own Korean for its auth app (its wording differs between releases)."""
    from django.apps import apps
    from django.utils import translation

    with translation.override("ko"):
        return str(apps.get_app_config("auth").verbose_name)


def test_the_scheduler_tables_come_last_and_named_for_what_they_are(admin_client):
    korean = admin_client.get(INDEX_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert _sections(korean) == [auth_in_korean(), "학습 큐", "스케줄러 (내부용)"]
    assert "스케줄러 작업 실행 기록" in korean and "스케줄러 작업" in korean
    assert "APScheduler" not in korean and "Django job" not in korean
    english = admin_client.get(INDEX_URL).content.decode()
    assert _sections(english)[-1] == "Scheduler (internal)"


def test_an_operator_who_is_no_superuser_never_sees_them():
    client = staff(*Permission.objects.values_list("codename", flat=True))  # every permission
    page = client.get(INDEX_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "학습 큐" in _sections(page) and "스케줄러 (내부용)" not in _sections(page)
    assert "django_apscheduler" not in page  # nor in the sidebar
    assert client.get(reverse("admin:app_list", args=["django_apscheduler"])).status_code == 404


def test_a_view_only_list_is_titled_in_our_korean_not_djangos(admin_client):
    page = admin_client.get(JOBS_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "<h1>조회할 문항 작업 선택</h1>" in page
    assert "보기위한" not in page and "를(을)" not in page
