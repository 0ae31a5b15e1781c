"""Operations: health, readiness and metrics endpoints, request ids and JSON logs, graceful
restarts of a server, and the worker (`manage.py worker`). See docs/operations.md,
"Processes, health and metrics"."""
