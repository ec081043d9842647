"""Device and host memory of a run: buffers, the spin gate, shared buffers, the System."""
