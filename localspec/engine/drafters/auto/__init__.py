"""The adaptive controller (`--drafter auto`): its costs, its acceptance model and its choice."""
