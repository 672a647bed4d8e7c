"""Looking at data: `stats` on packed outputs (measured) and on raw input (what-if), and
`verify`, the one row checker.

May import: core, read, tokenize, plan, write, engine.
"""
