"""packcli's benchmarks: one runner, one function per benchmark, any two commits compared.

`python -m benchmarks` (or `make bench`, `make bench-compare REF=...`); docs/benchmarks.md.
"""
