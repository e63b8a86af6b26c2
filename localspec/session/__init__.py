"""A loaded pair for chat: loading, streaming an answer, live statistics, history and settings."""
