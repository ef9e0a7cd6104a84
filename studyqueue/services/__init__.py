"""Talking to the LLM server: the HTTP client, reading its replies, the gate that bounds
concurrent calls, the circuit breaker, and the redactor that keeps secrets out of every text."""
