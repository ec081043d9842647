"""gpubw-example: a minimal gpubw plugin (a testcase and a writer) to start one from."""
