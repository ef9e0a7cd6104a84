"""The explanation product: the prompts and their versions, the answer parser and the
quality flags, the stored revisions, the review queue, what is outdated, the diff shown
to a reviewer and the import and export of questions.

It builds on the queue (``studyqueue.queue``) and the LLM services, never on the consumer,
the admin or the commands.
"""
