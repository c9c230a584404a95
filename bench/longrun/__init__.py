"""Long runs: a context policy against its baseline and its cost floor, per runtime profile.

One conversation of ``--turns`` turns (20) of ``--rounds-per-turn`` rounds (10: nine tool
rounds, then an answer) runs on an in-process node over an embedded nats-server, against
the local Messages API server (``actline.llm.fake_anthropic``) through the real
``anthropic`` client, so that usage, cache reads and writes are accounted
(``actline.llm.cache_sim``). Only the model's choices are scripted: each tool round fetches
a new page from ``bench.fetch`` (``--result-tokens`` words of text, 2,500 by default), and
every fourth round reads the previous round's result again (as an agent does when it needs
a detail back). A planted fact (``PLANTED|code=F07|value=amber-4412``) sits in the middle
of one page per turn. Summary requests (the compaction's tool-free model call) are
answered extractively: the planted facts found in the request, as the structured
summary's JSON.

Runs per profile (``--profiles``, all four built-in ones by default):

- the policy, with the context watchdog and without it (the profile as built in, the
  turn's profile table setting only ``watchdog``);
- the baseline (``--no-baseline`` skips it): the smart layer off, by the profile table
  ``context_policy`` "append" (plain append-only with the three cache marks, compaction
  only at the context limit; passed only when the profiles know that key), ``retention``,
  ``ttl_pruning`` and ``watchdog`` false;
- the long run (``--no-long`` skips it): the policy with the watchdog over
  ``--long-turns`` turns (60).

Reported per run: the peak rendered context (the largest prompt in tokens), compactions
(and how many the watchdog asked for) and the turn of the first, all input tokens, the
cache-read share of them, the cost in base-price input tokens (uncached + 1.25 x 5-minute
cache writes + 2 x 1-hour cache writes + 0.1 x cache reads, summary calls included), that
cost against the same run's tokens without caching, the cost of each turn (every request
made while the turn ran, summaries included), the cost floor and the cost against it, and
the planted facts still recalled at the end: the share of planted values present in the
last prompt the model saw (in the context, a summary or the memory hotset), which is what a
model could answer from without a tool call.

The floor (``bench.longrun.floor``) is the least the run's own contexts could cost: every
token that enters the context written to the cache once (1.25x) and read (0.1x) by each
later request that keeps it; the uncached tail after a request's last cache mark at 1.0x,
and summary requests at their actual cost.

Targets, per profile, of the policy run with the watchdog: cost at most 0.7x (fast 0.8x)
of the cost measured before the context policy (``report.TODAY``; judged at the default
sizes only), cache reads at least 85 % of input, cost within 1.3x of the floor, the peak
context within the profile's ``context_tokens``, every planted fact recalled, a cost below
the baseline's, and for the long run a flatness of at most 1.2 (the mean cost of the last
third of the turns over the middle third's: turns 41-60 over 21-40). Missed targets are
reported, not turned into the exit status; a turn that does not complete fails the run.

    python -m bench.longrun [--turns 20] [--rounds-per-turn 10] [--long-turns 60]
        [--profiles fast,balanced] [--no-baseline] [--no-long] [--quick]

The parts: ``scenario`` (pages, facts, the scripted model), ``run`` (the conversations and
the command line), ``floor`` (cost per request and turn, the floor) and ``report``
(flatness, targets, tables).
"""

from bench.longrun.floor import content_blocks, floor_tokens, run_floor, turn_costs, usage_cost
from bench.longrun.report import TODAY, flatness, table, targets, targets_table
from bench.longrun.run import main, profile_table, run_all, run_one
from bench.longrun.scenario import REREAD_EVERY, ScriptedAgent, fact, fact_pages, page_text

__all__ = [
    "REREAD_EVERY",
    "TODAY",
    "ScriptedAgent",
    "content_blocks",
    "fact",
    "fact_pages",
    "flatness",
    "floor_tokens",
    "main",
    "page_text",
    "profile_table",
    "run_all",
    "run_floor",
    "run_one",
    "table",
    "targets",
    "targets_table",
    "turn_costs",
    "usage_cost",
]
