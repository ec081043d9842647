"""The fleet view: read many nodes' reports, find each comparable figure's fleet median
and spread, and name the nodes, GPUs and links that lie below it (``gpubw fleet``).

Modules, in the order the data flows: :mod:`~gpubw.fleet.reading` (one report file into
per-node tables; the report's key), :mod:`~gpubw.fleet.cells` (the record of one figure,
:func:`~gpubw.fleet.cells.read_cells`), :mod:`~gpubw.fleet.gather` (paths to the newest
report of each node, read in worker processes), :mod:`~gpubw.fleet.stats` (fleets of one SKU
and the same options; medians, MADs, ratios, robust z), :mod:`~gpubw.fleet.findings` (what
lies below the fleet, as a node, GPU, pair or link), :mod:`~gpubw.fleet.analysis` (all of it,
start to end: a :class:`~gpubw.fleet.analysis.FleetReport`), and the outputs:
:mod:`~gpubw.fleet.formats` (a dict of formatters by ``--format`` name),
:mod:`~gpubw.fleet.text`, :mod:`~gpubw.fleet.document` (JSON), :mod:`~gpubw.fleet.metrics`
(OpenMetrics), :mod:`~gpubw.fleet.html` (the self-contained page).

The history (``--db``, ``--since``): :mod:`~gpubw.fleet.history` (the SQLite file, opened
under the cache files' rules), :mod:`~gpubw.fleet.trends` (each GPU against its own past),
:mod:`~gpubw.fleet.kept` (the analysis with the history), :mod:`~gpubw.fleet.trend_output`
(the trends as text and JSON).
"""
