"""Korean: Django's formats with seconds (24-hour clock)."""

DATETIME_FORMAT = "Y년 n월 j일 H:i:s"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT  # one format: studyqueue.times
TIME_FORMAT = "H:i:s"
