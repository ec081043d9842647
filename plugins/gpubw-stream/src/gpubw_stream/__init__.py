"""gpubw-stream: device-memory bandwidth the STREAM way, as a gpubw plugin.

The testcases ``stream_copy``, ``stream_scale``, ``stream_add``, ``stream_triad``,
``stream_read``, ``stream_write`` and ``stream_strided_read`` (module
:mod:`gpubw_stream.testcases`, entry-point group ``gpubw.testcases``) measure each device's
memory with its own CUDA kernels (the kernel module "gpubw_stream", :mod:`gpubw_stream.kernels`),
using only gpubw's public API.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
