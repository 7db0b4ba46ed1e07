"""The built-in trace modes (Triton's): ``triton`` (JSON trace files) and ``opentelemetry``
(OTLP/HTTP spans), each a plugin module registered by its own entry point."""
