"""The Typer commands and what they print: options in, one call into the stages, output
out. PackcliError becomes one line on stderr.

May import: core, read, tokenize, plan, write, engine, export, load, inspect.
"""
