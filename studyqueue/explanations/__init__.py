"""The explanation product: prompts, answer reading, quality checks, revisions, review, import
and export. It builds on the queue and the LLM services, never on the consumer, the admin or
the commands."""
