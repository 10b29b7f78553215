"""Reports of stored runs: comparisons between runs (the nightly regression verdict) and HTML pages."""
