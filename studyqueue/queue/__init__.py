"""The durable queue: the job state machine (``transitions``: every status write), the job
store a consumer calls (``store``: its connections and named methods), the attempts the
transitions record, the failure policy (``retry``: one decision for every failure), the
wake-ups (``notify``, ``poll``), the pauses a consumer keeps in memory (``pauses``), the
consumers' records (``presence``) and the database plumbing under them (``pg``,
``columns``).

Nothing here imports upward: not the explanations, the services, the consumer or the admin.
Every query runs on studyqueue's one database, through the models' managers: the rule is
``studyqueue.models.database()``'s.
"""
