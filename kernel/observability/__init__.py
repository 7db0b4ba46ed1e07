"""What the server tells about itself: metrics and their settings, per-version statistics and
latency summaries, the machine's and the GPUs' figures, logs (the set-up, the line layouts, the
context a line knows, the failed-request line), and request tracing (its settings and where ended
traces go)."""
