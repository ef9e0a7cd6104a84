"""The consumer process: ``Consumer`` (one per process: its connections, threads, gate and
breaker, and the cycle that claims and runs jobs) and the scheduler that drives it
(``scheduler``: when the next cycle runs, the wake-ups that bring it forward).

``from studyqueue.consumer import Consumer`` is the documented way to reach the consumer.
"""

from studyqueue.consumer.consumer import Consumer

__all__ = ["Consumer"]
