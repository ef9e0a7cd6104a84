"""Talking to the LLM server: the HTTP client and the replies it reads (``llm``), the gate
that bounds concurrent calls and the circuit breaker that stops them while the server is
down (``gate``; with its stored limits, ``gate_limits``, and its controller,
``gate_control``), and the redactor that keeps secrets out of every text (``redact``)."""
