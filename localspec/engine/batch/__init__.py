"""Several generations at once on one loaded pair: slots that share the target and the draft model.

Each step is one target pass for every slot (its verify tokens, or a chunk of a new
prompt, under its own sequence id) and one draft pass per draft position; the
planner picks each slot's draft from what the whole batch costs.
"""
