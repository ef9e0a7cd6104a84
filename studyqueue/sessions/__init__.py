"""Study sessions: recording what a learner answered (``recording``) and the summaries the
model writes of them (``summaries``; the job is ``workers.session_summary``)."""
