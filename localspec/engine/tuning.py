"""Every tuned number of auto and the batch planner, in one table: each with the one line that says why it is what it is.

A value here was chosen on the bench's prompts (the commit that set it has the measurements); the code that uses
it imports it from here, so a retune is one line and a reader sees every knob at once.
"""

from __future__ import annotations

from localspec.engine.drafters.edits import RESUMED

# --- what the pass costs learn (pass_costs.py) -------------------------------------------------------------------
COST_DECAY = 0.97  # per observed pass: the last ~30 steps weigh most
SPIKE = 2.0  # a pass slower than this many times its estimate is noise (a page fault, a busy core), not a cost...
SPIKE_RUN = 3  # ...unless this many in a row at one size are: then the machine (or the estimate) changed
CALIBRATION_SIZES = (1, 2, 4, 8, 16)  # one-sequence passes timed at the first load: 16 tells whether a long copy pays
CALIBRATION_REPEATS = 1  # a few short passes, so the first token never waits long; every step refines them after
# Target batch sizes the batch scheduler times at start-up, up to 8 slots drafting 7 each: dense where CPU kernels change
# pace (4 tokens cost 2.2x one, 8 cost 5x, 16 cost 6.5x on the real Q4_K_M target), where interpolation would misjudge.
BATCH_CALIBRATION_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)

# --- acceptance (auto/acceptance.py, agreement.py) --------------------------------------------------------------
ACCEPTANCE_DECAY = 0.97  # per observation: the last ~30 weigh most (it was COST_DECAY's value, reused; named apart here)
ACCEPTANCE_PRIOR_WEIGHT = 2.0  # draft positions' worth of belief in a rate's prior, before its own evidence
# How often a lookup run's first tokens hold, by agreement class, before any evidence (what the bench's prompts showed):
# a 3-token match is right half the time, an 8-token one 9 times in 10.
MATCH_CLASS_PRIORS = {RESUMED: 0.3, 2: 0.4, 3: 0.5, 4: 0.6, 6: 0.7, 8: 0.8, 12: 0.85, 16: 0.9, 24: 0.9, 32: 0.9}
EARLY = 4  # a run's first positions, judged by its class; past them, by every run's evidence together
COPY_PRIOR = 0.9  # how often a copy that has held EARLY tokens goes on one more, before any evidence
SHORT = 4  # match classes below this learn apart where the target is unsure: a coincidence there rarely holds
UNSURE_PRIORS = {bound: prior for bound, prior in MATCH_CLASS_PRIORS.items() if bound < SHORT} | {RESUMED: 0.1}  # their priors
LONG = 8  # match classes from this one on are copies, whose hazard is also the answer's own (CopyEffect)
EFFECT_WEIGHT = 4.0  # expected misses' worth of belief in the learned rates, before this answer's copies show otherwise

# --- where a copy breaks (auto/edit_points.py) -------------------------------------------------------------------
PAIR_WEIGHT = 1.0  # a pair's positions' worth of belief in the answer's mean, before its own evidence
MEAN_PRIOR = 0.1  # how often a judged lookup position breaks, before the answer shows its own
MEAN_WEIGHT = 4.0  # positions' worth of belief in MEAN_PRIOR
FLAGGED = 0.05  # an excess hazard past this marks an edit point

# --- how sure the target is (auto/confidence.py) ------------------------------------------------------------------
CLASS_EDGES = (0.6, 0.8, 0.9, 0.95)  # the confidence classes' lower bounds, past the first (from 0)
SURE = 0.9  # below it the target is unsure, and short lookup matches are judged apart there
PRIOR_MAX = 0.7  # a class's prior at most: a draft trusted at once was asked on copied text, each ask a costly catch-up
CONFIDENCE_DECAY = 0.7  # per step: the last three or four steps weigh most, so a change of text shows at once

# --- the draft model's catch-up (auto/catch_up.py) ----------------------------------------------------------------
RUN_PRIOR = 8.0  # asks a resume is assumed to buy before any was seen
RUN_PRIOR_WEIGHT = 1.0  # ...worth this many observed runs
RUN_DECAY = 0.8  # per run: the last few weigh most (code edits and code writing buy different runs)
RESUME_MIN = 8  # missed tokens that make an ask a resume, whose run teaches the spread
COPY_STEP = 3  # lookup tokens a step must have had accepted to count as a copy
LOOKUP_SHARE_DECAY = 0.8  # per step: the share of the last few steps that lookup copied in
NEW_ANSWER_LOOKUP_SHARE = 0.5  # a new answer's share before its first step: only its first steps tell a rewrite from an edit
CARRIED_RUNS = 4  # what earlier answers' lookup runs taught weighs as this many runs per position in a new one
CARRIED_ASKS = 4  # what earlier answers taught of the draft model weighs as this many asks in a new one

# --- what auto may choose (auto/planner.py, exploration.py) -----------------------------------------
MODEL_K_MAX = 8  # the longest draft auto asks of the draft model (lookup runs, which cost nothing to find, go further)
HYBRID_LOOKUP_MAX = 16  # lookup tokens a hybrid step may take before the model continues (bounds the search)
# Of the time spent decoding: what tries of the draft model may lose at most, each priced at what it loses if nothing is
# accepted. Thin lookup bets get only what lookup won (thin_bets.py), so where nothing pays, this is all auto may lose.
EXPLORE_SHARE = 0.02
THIN_MATCH = 3  # a lookup match shorter than this, where the target is unsure, is thin evidence
# A target pass of another size than the last one's pays for a new graph (pass_costs.py), and again when the steps return
# to the size they had: a step that leaves the last size is priced this many changes. On the H200's costs (tests/
# test_gpu_costs.py) auto ran at 0.74x the best fixed drafter blind to the changes, 0.89x pricing one, 1.00x two.
SWITCH_LEGS = 2

# --- the batch planner and scheduler (engine/batch/) ---------------------------------------------------------------
ASCENT_ROUNDS = 2  # passes over the auto slots: a second one lets each slot answer the others' first choices
OVERHEAD_DECAY = 0.97  # per step: the scheduler's own time per step, kept current as the batch changes (the same ~30)
MIN_PREFILL_CHUNK = 8  # fewer tokens a pass would read a prompt at a crawl, however cheap they look
STALL_FLOOR = 16  # a prompt chunk this long may always ride: 16 read at 3/4 of a long pass's speed, 8 at half
REUSE_SHARE = 0.5  # a free slot whose cache holds this much of a prompt takes it (llama.cpp's slot similarity)

# A draft of another tokenizer (bridged.py) samples over the tokens both vocabularies share (TLI) where at least this
# share of its vocabulary is the target's too; below it, a sampled answer is drafted greedily and judged by exact match.
# vLLM's issue #45020 measured 72-75% for real pairs of families (SmolLM2 -> Qwen2.5, Llama-3.2 -> Qwen2.5).
TLI_MIN_OVERLAP = 0.5
