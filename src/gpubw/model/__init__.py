"""The data every layer shares: results, options, errors, sizes, report I/O, output files."""
