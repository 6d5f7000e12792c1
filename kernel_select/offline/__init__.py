"""Offline tools: shapes, the GPU harness, datasets, training, evaluation and comparisons.

Nothing here runs inside torch.compile.
"""
