"""The knowledge base: curated entries, the SQLite store, the matcher and support guidance.

May import ``collectors.findings`` (the data types) and nothing else of ``collectors``.
"""
