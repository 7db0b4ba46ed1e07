"""What the server tells about itself: per-version statistics and latency summaries, logs (the
set-up, the line layouts), and request tracing (sampling, the trace API's settings, the flag).
What plugins share of it is the SDK's: the metrics settings, the machine's and the GPUs'
figures, the log context and the failed-request line, the trace records and sinks
(``inferd.kernel.sdk``)."""
