"""`packcli export`: a packed output in another stack's format (Megatron-LM, MosaicML
Streaming, Megatron-Energon, datatrove/nanotron), read from the shards block by block.

May import: core, plan, write.
"""
