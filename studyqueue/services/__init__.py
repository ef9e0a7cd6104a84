"""Talking to the LLM server: the HTTP client, reading its replies, the gate that bounds
concurrent calls (with its stored limits, ``gate_limits``, and the reclaim of a stuck
holder's slot, ``gate_reclaim``), the gate's controller, the circuit breaker, and the
redactor that keeps secrets out of every text."""
