"""Talking to the LLM servers: the client (``llm``), the endpoints and their ``pool``, the
``gate`` with its breaker and adaptive limit, and the redactor that keeps secrets out of text."""
