"""An output on disk: the token spill, rows gathered from it, shard writers and readers,
the column names, manifest.json and report.json (schema and reader), the output
directory's lock and atomic writes, remote outputs.

May import: core, read, plan.
"""
