"""The ground every stage stands on: the one error type, the option values and checks,
the JIT wrapper, threads and signals, filesystem URLs, the version.

May import: nothing of packcli.
"""
