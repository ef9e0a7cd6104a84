"""The durable queue: the job state machine (``transitions``: every status write), the
attempts it records, the failure policy (``retry``), the wake-ups (``notify``, ``poll``),
the pauses a consumer keeps in memory (``pauses``), the consumers' records (``presence``)
and the database plumbing under them (``rawsql``, ``pg``, ``columns``).

Nothing here imports upward: not the explanations, the services, the consumer or the admin.
Every query runs on studyqueue's one database, through the models' managers: the rule is
``studyqueue.models.database()``'s.
"""
