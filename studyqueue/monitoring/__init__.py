"""What the operator watches: the numbers the dashboard, its JSON view and the metrics
share (``stats``), the liveness and readiness checks (``health``) and the Prometheus
collector (``metrics``)."""
