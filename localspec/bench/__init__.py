"""`localspec bench`: plain and speculative decoding measured side by side in one process."""
