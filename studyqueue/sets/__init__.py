"""Question sets ("the 2026 midterm"): membership and progress (``question_sets``), when a set
will be done (``eta``), and the notice that it is (``notices``)."""
