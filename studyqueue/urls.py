"""studyqueue's own URLs: ``path("studyqueue/", include("studyqueue.urls"))``."""

from django.urls import path

from studyqueue import views

app_name = "studyqueue"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("api/sessions", views.api_sessions, name="api-sessions"),
    path("api/xapi/statements", views.api_xapi_statements, name="api-xapi-statements"),
    path("api/sessions/<path:key>/summary", views.api_summary, name="api-summary"),
    path("api/sessions-by-id/<int:pk>/summary", views.api_summary, name="api-summary-by-id"),
    path("api/learners/<path:learner>", views.api_learner, name="api-learner"),
]
