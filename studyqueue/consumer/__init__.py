"""The consumer process: ``Consumer`` (one per process) and the ``scheduler`` that drives it.
``from studyqueue.consumer import Consumer`` is the documented way to reach the consumer."""

from studyqueue.consumer.consumer import Consumer

__all__ = ["Consumer"]
