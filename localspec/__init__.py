"""localspec: a local runner for speculative decoding with GGUF target/draft pairs."""

__version__ = "0.1.0"
