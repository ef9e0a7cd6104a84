"""The durable queue: the job state machine (``transitions``: every status write, and the
attempt log it keeps), the job store a consumer calls (``store``: its connections and named
methods), the failure policy (``retry``: one decision for every failure), the wake-ups
(``notify``, ``poll``), the consumers' records (``presence``) and the PostgreSQL plumbing
under them (``pg``).

Nothing here imports upward: not the explanations, the services, the consumer or the admin.
Every query runs on studyqueue's one database, through the models' managers: the rule is
``studyqueue.models.database()``'s.
"""
