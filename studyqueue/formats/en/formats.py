"""English: Django's formats with seconds (24-hour clock)."""

DATETIME_FORMAT = "N j, Y, H:i:s"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT  # one format: studyqueue.times
TIME_FORMAT = "H:i:s"
