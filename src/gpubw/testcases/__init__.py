"""gpubw's built-in testcases: nvbandwidth's 35, in its order and with its keys, and gpubw's
own. Each is an entry point of ``gpubw.testcases`` (see pyproject.toml), grouped by family:

* :mod:`.host` -- host <-> device, one device at a time (#0-#3, #16-#19);
* :mod:`.peer` -- device <-> device over every accessible pair (#4-#7, #20-#23);
* :mod:`.host_all` -- host <-> device with every device busy (#8-#11, #24-#27);
* :mod:`.fan` -- all to one, one to all (#12-#15, #28-#31);
* :mod:`.latency` -- pointer-chase latency (#32, #33);
* :mod:`.local` -- copies inside one device (#34, device_local_copy_sm).

The shapes they share (1 x N, N x N, bidirectional, all to one, host traffic) are in
:mod:`.shapes`.
"""
