"""One run: the plugin registry, the loop over testcases, ranks, signals, output capture."""
