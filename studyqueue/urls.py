"""studyqueue's own URLs: ``path("studyqueue/", include("studyqueue.urls"))``."""

from django.urls import path

from studyqueue import views

app_name = "studyqueue"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
]
