"""The drafters: each proposes tokens for the target to verify, behind one protocol."""
