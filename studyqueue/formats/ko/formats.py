"""Korean: Django's formats with seconds (24-hour clock)."""

DATETIME_FORMAT = "Y년 n월 j일 H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
