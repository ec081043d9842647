"""Facts about the node's hardware from NVML: PCIe, NVLink, ECC, clocks, processes."""
