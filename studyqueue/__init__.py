"""studyqueue: a durable Django job queue that turns study questions into LLM explanations."""
