"""GGUF files read without their weights: the header reader and the model summary."""
