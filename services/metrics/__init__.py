"""MetricsService: per-GPU time series written by agents and operators, read back by window."""
