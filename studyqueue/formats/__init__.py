"""Date and time formats with seconds, for the languages the admin speaks.

Django's own formats show minutes only ("Nov. 30, 2026, 7:52 p.m."); a queue's times need
seconds. Enable with ``FORMAT_MODULE_PATH = ["studyqueue.formats"]``: what a module here
leaves out falls back to Django's formats for that language.
"""
