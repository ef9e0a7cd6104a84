"""The durable queue, the job engine (each module's concept: docs/architecture.md). Nothing
here imports upward, and every query runs on studyqueue's one database through the models'
managers (``studyqueue.models.database()``).
"""
