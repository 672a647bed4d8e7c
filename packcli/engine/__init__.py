"""Running `pack`: reading and tokenizing concurrently into segments (ingest), the local
engine, the Ray engine's driver and tasks, the job both share, the report and manifest
they fill, and the same steps on arrays in memory (`pack_sequences`).

May import: core, read, tokenize, plan, write.
"""
