"""Packed outputs fed to training: Hugging Face `datasets` and PyTorch (`Dataset`,
collators, flash-attention varlen), each behind its extra.

May import: core, plan, write, engine.
"""
