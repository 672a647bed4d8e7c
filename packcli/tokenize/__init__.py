"""Records to token sequences: the tokenizer and its start-up cache, the encoders (HF,
the byte-identical tiktoken path), the builders for text, prompt/completion, chat and
ids, and the forked workers that run them.

May import: core, read.
"""
