"""Input records: files, globs, directories and stdin expanded, then JSON Lines, JSON
arrays, Parquet and Arrow read in bounded batches of good records, bad ones named by
file and line or row.

May import: core.
"""
