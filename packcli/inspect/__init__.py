"""Looking at data: `stats` on packed outputs (measured) and on raw input (what-if),
`verify`, an output checked against its manifest and by the one row checker, and `show`,
rows as the model will see them.

May import: core, read, tokenize, plan, write, engine.
"""
