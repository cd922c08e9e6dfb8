// Metrics module: Prometheus text-format registry (counters, gauges, histograms).
