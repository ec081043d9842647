"""How copies are timed: the one protocol, the initiators, latency, the rank gate."""
