"""English: Django's formats with seconds (24-hour clock)."""

DATETIME_FORMAT = "N j, Y, H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
