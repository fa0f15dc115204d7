"""Evidence: the training-log parser, node collectors, resolvers and bundles.

Nothing here imports ``knowledge`` or ``bot``.
"""
