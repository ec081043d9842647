"""Work on saved reports: compare two runs, plot one."""
