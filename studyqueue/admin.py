"""Admin registrations (the full operator admin comes with its own issue)."""

from django.contrib import admin

from studyqueue.models import StudyQuestion, StudyQuestionJob


@admin.register(StudyQuestion)
class StudyQuestionAdmin(admin.ModelAdmin):
    list_display = ("id", "text", "explained_at")
    search_fields = ("text",)


@admin.register(StudyQuestionJob)
class StudyQuestionJobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "study_question",
        "kind",
        "status",
        "attempts",
        "error_code",
        "created_at",
    )
    list_filter = ("status", "kind", "error_code")
    list_select_related = ("study_question",)
    show_full_result_count = False
    readonly_fields = [f.name for f in StudyQuestionJob._meta.fields]

    def has_add_permission(self, request) -> bool:  # jobs are created by enqueueing
        return False
