"""Admission control: the operator's ``limits:`` — requests and tokens per minute, concurrent runs,
spend budgets — per organisation, key, end user and agent (docs/limits.md). Beneath the engine: a
run's scope (``engine/run.py``) holds a run's admission; nothing here knows about runs."""
