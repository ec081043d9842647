"""Is the node healthy? Expectations, verdict rules, NVML facts around a run."""
