"""The speculative decoding engine: models, drafters, verification, the decode loop, statistics.

This package never imports textual; the UI depends on the engine, not the reverse.
"""
