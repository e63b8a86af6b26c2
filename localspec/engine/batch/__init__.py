"""Several generations at once on one loaded pair: slots that share the target and the draft model.

Each step is one target pass for every slot (its verify tokens, or a chunk of a new
prompt, under its own sequence id); each drafter proposes for all the slots it
serves at once (a draft model in one pass per draft position), and auto's planner
picks its slots' drafts from what the whole batch costs.
"""
