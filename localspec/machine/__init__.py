"""This machine: device memory, the memory planner, GPU build detection."""
