"""memsearch recall: 20 facts planted in a 200-turn conversation, found by paraphrased questions.

The conversation is generated deterministically: each turn is a user prompt and an assistant
answer on one of 26 everyday work and life topics, several of which share vocabulary with the
facts on purpose (database tuning, invoices, deploys, VPN trouble, team lunches, feature-flag
naming, code review etiquette, ...). Twenty turns carry a planted fact instead. The queries are
written as a colleague would ask them weeks later, in other words than the fact's.

Hybrid ranking must put the planted turn in the top 3 for at least 90% of the queries; BM25
alone is measured and printed next to it (``pytest -s``) but not asserted.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from actline.tools.embeddings.minilm import Embedder
from actline.tools.search.memindex import MemIndex
from actline.tools.search.vectors import DictVectorCache

from . import memfixture

TURNS = 200
T0 = 1_800_000_000.0
SEED = 20
TOP = 3
TARGET = 0.9

SLOTS: dict[str, list[str]] = {
    "table": ["orders", "events", "sessions", "audit_log", "user_profiles", "shipments"],
    "env": ["staging", "production", "dev", "QA"],
    "seconds": ["4", "9", "12", "30", "45"],
    "customer": ["Acme Corp", "Globex", "Initech", "Umbrella Health", "Stark Logistics"],
    "days": ["15", "30", "45", "60"],
    "step": ["build", "unit test", "docker push", "migration", "smoke test"],
    "city": ["Porto", "Lisbon", "Kyoto", "Vienna", "Montreal", "Edinburgh", "Seville"],
    "ingredient": ["chickpeas", "spinach", "leftover rice", "salmon", "mushrooms", "eggplant"],
    "ingredient2": ["lemon", "feta", "coconut milk", "garlic", "sweet potato", "tofu"],
    "lib": ["pandas", "asyncio", "requests", "SQLAlchemy", "pytest", "Django"],
    "error": ["KeyError", "TimeoutError", "a RecursionError", "an IntegrityError", "a 403"],
    "weeks": ["6", "8", "10", "12"],
    "distance": ["5k", "10k", "half marathon"],
    "tone": ["friendly", "formal", "concise", "confident"],
    "team": ["platform", "growth", "mobile", "data", "design"],
    "role": ["senior backend engineer", "product designer", "data analyst", "SRE"],
    "concept": ["OAuth refresh tokens", "TLS handshakes", "certificate pinning", "CSRF tokens"],
    "plant": ["basil", "tomato", "fiddle-leaf fig", "monstera", "lemon tree"],
    "service": ["checkout", "notifications", "search-indexer", "auth-gateway"],
    "book": ["The Left Hand of Darkness", "Project Hail Mary", "Piranesi", "Dune"],
    "product": ["the expense app", "our new dashboard", "the browser extension"],
    "amount": ["200", "500", "1,000", "2,500"],
    "month": ["January", "April", "August", "November"],
    "weekday": ["Tuesday", "Wednesday", "Friday"],
    "number": ["3", "4", "5", "7"],
}

FILLER: list[tuple[list[str], list[str]]] = [
    (
        [
            "The {table} query takes {seconds} seconds on the {env} database. How do I find out "
            "why?",
            "Should I add an index on {table}.created_at? Reports on the {env} database are slow.",
        ],
        [
            "Start with EXPLAIN ANALYZE on the {table} query and look for a sequential scan. If "
            "the filter is on created_at, a composite index usually helps; check the write "
            "overhead on the {env} database before adding it.",
            "An index on created_at helps range filters, but {table} gets many writes. Measure "
            "with EXPLAIN first, then try a partial index that covers only recent rows.",
        ],
    ),
    (
        [
            "Can you draft a polite email to {customer} about an invoice that is {days} days "
            "overdue?",
            "{customer} disputes a line on their invoice. How should billing respond?",
        ],
        [
            "Here is a draft: a friendly reminder that the invoice is {days} days past due, the "
            "amount and the payment link, and an offer to walk their accounts team through it.",
            "Acknowledge the dispute, pause the dunning emails for {customer}, ask which line "
            "looks wrong, and attach the usage report that backs the charge.",
        ],
    ),
    (
        [
            "The {env} deploy failed at the {step} step again. What should I check first?",
            "Our release pipeline is flaky in the {step} step. Any ideas?",
        ],
        [
            "Look at the logs of the {step} step and compare them with the last green run. "
            "Flaky {step} failures often come from shared state or an expired registry token.",
            "Retry once to rule out a transient error, then pin the runner image; the {step} "
            "step of the {env} pipeline changed when the base image was updated.",
        ],
    ),
    (
        ["What can I cook tonight with {ingredient} and {ingredient2}?"],
        [
            "Try a quick one-pan dish: sauté {ingredient} with garlic, add {ingredient2}, season "
            "and serve with bread or rice. It takes about 25 minutes.",
            "A warm salad works well: roast the {ingredient}, toss it with {ingredient2}, olive "
            "oil and herbs, and top it with toasted seeds.",
        ],
    ),
    (
        ["Suggest a relaxed two-day itinerary for {city}.", "What should I eat in {city}?"],
        [
            "Day one: the old town on foot, a long lunch, a museum in the afternoon. Day two: a "
            "market in the morning and a viewpoint at sunset. {city} is best explored slowly.",
            "In {city} try the local bakeries in the morning and a small family restaurant for "
            "dinner; book ahead on weekends.",
        ],
    ),
    (
        ["Why does my {lib} code raise {error} only sometimes?"],
        [
            "Intermittent {error} with {lib} usually means a race or missing data. Add logging "
            "around the call, reproduce with a fixed seed, and check the inputs that fail.",
            "Wrap the failing {lib} call, print the inputs when it raises {error}, and write a "
            "test with that input so the bug cannot come back.",
        ],
    ),
    (
        ["Make me a {weeks}-week plan to run a {distance}."],
        [
            "Run three times a week: one easy run, one interval session and one long run that "
            "grows by ten percent each week; taper in the last week before the {distance}.",
            "Week one starts with run-walk intervals; by week {weeks} you run the full {distance} "
            "distance at an easy pace. Rest days matter as much as the runs.",
        ],
    ),
    (
        ["Rewrite this paragraph so it sounds more {tone}: 'we will try to fix it soon'."],
        [
            "A more {tone} version: 'We have identified the issue and expect to ship a fix this "
            "week; we will update you as soon as it is live.'",
        ],
    ),
    (
        ["Summarise the notes from the {team} team sync.", "Turn the {team} retro into actions."],
        [
            "The {team} sync agreed to cut scope for the next milestone, move the demo to next "
            "week and pair on the flaky tests. Owners are listed next to each item.",
            "Actions from the {team} retro: shorter stand-ups, a shared on-call handbook, and a "
            "monthly review of the oldest open tickets.",
        ],
    ),
    (
        ["Draft interview questions for a {role} candidate."],
        [
            "For a {role}: one question on a system they are proud of, one on a failure and what "
            "changed after it, a practical exercise, and time for their questions.",
        ],
    ),
    (
        ["Explain how {concept} work, in simple terms."],
        [
            "In short: {concept} let the client and server agree on who is who without sending "
            "secrets in the clear. The server proves its identity, and both sides derive keys.",
        ],
    ),
    (
        ["My {plant} leaves are turning yellow. What am I doing wrong?"],
        [
            "Yellow leaves on a {plant} usually mean too much water or too little light. Let "
            "the soil dry between waterings and move it closer to a bright window.",
        ],
    ),
    (
        ["Is it better to put {amount} euros a month in an index fund or pay off my loan?"],
        [
            "If the loan's interest is above what you expect from the fund, pay the loan first. "
            "Keep an emergency budget of three months either way before investing {amount} a "
            "month.",
        ],
    ),
    (
        ["How do I set CPU and memory limits for the {service} pods?"],
        [
            "Set requests and limits in the {service} deployment: requests for scheduling, "
            "limits to cap usage. Watch for OOM kills after lowering memory and check the node "
            "capacity of the cluster.",
        ],
    ),
    (
        ["Our web fonts load late and the page jumps. How do I fix that?"],
        [
            "Preload the main font files, set font-display: swap, and pick a fallback font with "
            "similar metrics so the layout barely shifts when the web font arrives.",
        ],
    ),
    (
        [
            "What's a good etiquette for reviewing pull requests on the {team} team?",
            "How do I squash my last {number} commits?",
        ],
        [
            "Keep pull requests small, review within a day, comment on the code rather than the "
            "person, and mark nits as optional so authors know what blocks the merge.",
            "Run git rebase -i HEAD~{number}, mark all but the first commit as squash, then "
            "force-push with lease to your branch.",
        ],
    ),
    (
        ["Write a support reply to a customer who cannot reset their password."],
        [
            "Apologise for the trouble, send the reset link again, explain that it expires after "
            "one hour, and offer a call if the email still does not arrive.",
        ],
    ),
    (
        ["Give me five headline ideas for the launch of {product}."],
        [
            "1. Meet {product}. 2. Less busywork, more done. 3. Built for teams that move fast. "
            "4. Your numbers, finally clear. 5. Try {product} free for 30 days.",
        ],
    ),
    (
        ["How do I compute monthly retention cohorts in SQL?"],
        [
            "Group users by signup month, then count how many are active in each later month; a "
            "window function over the cohort gives the percentages for a retention triangle.",
        ],
    ),
    (
        ["Recommend science fiction novels similar to {book}."],
        [
            "If you liked {book}, try The Dispossessed, A Memory Called Empire and Children of "
            "Time: thoughtful worlds with characters you care about.",
        ],
    ),
    (
        ["How often should I descale my coffee machine?"],
        [
            "Every one to three months depending on your water hardness; use a citric acid "
            "solution, run it through twice, then flush with clean water.",
        ],
    ),
    (
        ["What naming convention should we use for feature flags in the {service} service?"],
        [
            "Use team.area.purpose, for example {team}.checkout.new_flow, write the owner in "
            "the flag description, and prefer booleans over multi-variant flags when possible.",
        ],
    ),
    (
        ["What's the easiest way to back up the photos on my laptop?"],
        [
            "Use two copies: an external drive with automatic backups and a cloud photo service. "
            "Test a restore once so you know the backup actually works.",
        ],
    ),
    (
        ["The VPN keeps disconnecting every hour on my Mac. Any fix?"],
        [
            "Check the VPN client's idle timeout, turn off Wi-Fi power saving, and update the "
            "client; if it still drops, collect the logs and open an IT ticket.",
        ],
    ),
    (
        [
            "Can you summarise incident {ticket} for the weekly report?",
            "Is {ticket} resolved? The {service} alerts look quiet now.",
        ],
        [
            "{ticket}: the {service} service returned errors for about {seconds} minutes after a "
            "config change; it was rolled back and a follow-up adds a canary check.",
            "Yes, {ticket} is resolved. The {service} errors stopped after the rollback; the "
            "postmortem is scheduled for {weekday}.",
        ],
    ),
    (
        ["Any ideas for a team lunch on {weekday} for {number} people?"],
        [
            "A build-your-own taco or grain-bowl spread works for {number} people and most diets. "
            "Order a day ahead and ask everyone about dietary needs in the invite.",
        ],
    ),
]

FACTS: list[tuple[int, str, str]] = [
    (
        6,
        "Note for the ops runbook: our staging database password rotates every 45 days, so "
        "scripts should read it from Vault instead of hard-coding it.",
        "Got it. I added a Secrets section to the runbook saying that the staging credentials "
        "change on a 45-day cycle and that jobs must fetch them from Vault at start-up.",
    ),
    (
        14,
        "Who should I talk to before I change the invoices schema?",
        "Priya owns the billing migration, so check with her first; she is moving the invoice "
        "tables to the new ledger service this quarter.",
    ),
    (
        23,
        "Remind me how our paging works if the primary doesn't respond.",
        "If the primary on-call engineer does not acknowledge a page within 12 minutes, "
        "PagerDuty escalates it to the secondary, and after another 10 minutes to the "
        "engineering manager.",
    ),
    (
        31,
        "We finally decided: the team offsite this October will be in Lisbon, three days at a "
        "hotel near the river.",
        "Great choice. I drafted an announcement for the team channel with the October dates "
        "and the venue, and a short packing list.",
    ),
    (
        40,
        "What's the API rate limit for free-tier customers again?",
        "Free-tier customers can make 600 requests per minute; paid plans get 6,000, and bursts "
        "above the limit receive HTTP 429 with a Retry-After header.",
    ),
    (
        48,
        "Marcus is allergic to peanuts, so the catering order for Friday must be completely "
        "nut-free.",
        "Understood. I rewrote the catering request to say nut-free for every dish and asked the "
        "caterer to confirm how their kitchen handles allergens.",
    ),
    (
        57,
        "Can we push the mobile app update this week?",
        "Not yet: the mobile release is frozen until the accessibility audit finishes on March "
        "3. After that we can ship version 4.2 to both stores.",
    ),
    (
        65,
        "How long do we keep backups of the analytics warehouse?",
        "Snapshots of the analytics warehouse are retained for 35 days in the cold-storage "
        "bucket, then deleted by a lifecycle rule.",
    ),
    (
        74,
        "Heads up: the VPN certificate expires on 14 June, and renewing it needs sign-off from "
        "the security team.",
        "Thanks, I added a reminder for the first week of June to start the renewal request "
        "with security.",
    ),
    (
        82,
        "How does Northwind usually pay us?",
        "Northwind, our largest customer, pays annually by wire transfer and never by card; "
        "their finance team needs the invoice at least 30 days before the due date.",
    ),
    (
        91,
        "Which fonts does the design system use?",
        "The design system uses Inter for body text and Source Serif for headings, with "
        "JetBrains Mono for code samples.",
    ),
    (
        99,
        "What instance type are the prod Kubernetes nodes?",
        "The production cluster runs 14 nodes of m6i.2xlarge, spread over three availability "
        "zones.",
    ),
    (
        108,
        "The quarterly board meeting moved from Thursday to the following Monday at 9am, please "
        "update the agenda.",
        "Updated: the agenda now shows Monday 9:00 and I moved the finance review slot to the "
        "start.",
    ),
    (
        116,
        "Jonas asked that review requests reach him before noon, since he works from Berlin.",
        "Noted. I'll suggest opening pull requests for Jonas in the morning so they land before "
        "12:00 Berlin time.",
    ),
    (
        125,
        "What's the plan for the legacy search service?",
        "The legacy search service will be shut down at the end of Q3 and replaced by the new "
        "Elasticsearch cluster; traffic moves over gradually from July.",
    ),
    (
        133,
        "Who is our SOC 2 auditor this year?",
        "Hartwell & Pike are auditing SOC 2 this year, and their fieldwork starts in the second "
        "week of May.",
    ),
    (
        142,
        "Where are the spare laptop chargers?",
        "Spare laptop chargers are kept in the locked cabinet next to the kitchen; the office "
        "manager has the key.",
    ),
    (
        150,
        "Is there a rule about how long feature flags can live?",
        "Yes: feature flags older than 90 days must be removed during the monthly cleanup "
        "sprint, unless they are marked as permanent kill switches.",
    ),
    (
        159,
        "What was churn last quarter?",
        "Churn last quarter was 3.2 percent, down from 4.1 percent the quarter before, mostly "
        "thanks to the onboarding changes.",
    ),
    (
        167,
        "What's the first-response target for urgent support tickets?",
        "Urgent support tickets must get a first response within 2 hours, around the clock; "
        "normal tickets within one business day.",
    ),
]

QUERIES: list[tuple[str, int]] = [
    ("how often do credentials for the pre-production DB change?", 6),
    ("where should our automation get the test environment database login from?", 6),
    ("who is in charge of moving the payments system over?", 14),
    ("how long before an unanswered alert goes to the backup person?", 23),
    ("where is the company retreat happening in the autumn?", 31),
    ("what city was chosen for the group getaway?", 31),
    ("how many calls per minute can a non-paying client make?", 40),
    ("which food allergy matters when we order lunch for the group?", 48),
    ("when are we allowed to publish the phone application again?", 57),
    ("for how many days are copies of the reporting data store preserved?", 65),
    ("when does the remote access cert run out?", 74),
    ("how does our biggest client settle their bills?", 82),
    ("which typefaces are specified in our UI style guide?", 91),
    ("what kind of machines host the live container platform?", 99),
    ("how many worker machines does prod run on?", 99),
    ("when was the directors' session rescheduled to?", 108),
    ("what time of day should I ask the German colleague to look at my code?", 116),
    ("when is the old lookup backend being decommissioned?", 125),
    ("which firm checks our compliance controls, and when do they begin?", 133),
    ("where can I find an extra power adapter for my notebook?", 142),
    ("how long may a toggle stay in the code before we delete it?", 150),
    ("what share of customers did we lose recently compared with before?", 159),
    ("how quickly must we answer high-priority help desk requests?", 167),
    ("what is our reply deadline for critical customer issues?", 167),
]


def turn_id(i: int) -> str:
    return f"t{i:03d}"


def _fill(template: str, rng: random.Random, chosen: dict[str, str]) -> str:
    if "{ticket}" in template and "ticket" not in chosen:
        chosen["ticket"] = f"INC-{rng.randint(1000, 9999)}"
    for name, values in SLOTS.items():
        if "{" + name + "}" in template and name not in chosen:
            chosen[name] = rng.choice(values)
    return template.format(**chosen)


def conversation(seed: int = SEED) -> Iterator[dict[str, Any]]:
    """The index rows of the 200 turns: a user row and an assistant row per turn."""
    return memfixture.synthetic(seed, TURNS, FACTS, FILLER, _fill, turn_id, (), T0)


def recall(index: MemIndex, mode: Any) -> tuple[float, list[str]]:
    """Share of queries whose planted turn is in the top 3, and the misses."""
    misses = []
    for query, turn in QUERIES:
        hits = index.search(query, roles={"user", "assistant"}, top_k=TOP, mode=mode)
        if turn_id(turn) not in [h.turn_id for h in hits]:
            misses.append(f"{query!r}: want {turn_id(turn)}, got {[h.turn_id for h in hits]}")
    return 1 - len(misses) / len(QUERIES), misses


@pytest.fixture(scope="module")
def index() -> MemIndex:
    """The conversation in a hybrid index, every row embedded."""
    index = MemIndex(Embedder.load(), DictVectorCache())  # `make` installs the model
    assert index.add(conversation()) == 2 * TURNS
    assert index.embed_pending() == 2 * TURNS
    return index


def test_the_synthetic_conversation_is_deterministic_and_plants_every_fact() -> None:
    rows = list(conversation())
    assert rows == list(conversation())
    assert len(rows) == 2 * TURNS
    assert len({r["turn_id"] for r in rows}) == TURNS
    texts = {(r["turn_id"], r["text"]) for r in rows}
    for turn, user, answer in FACTS:
        assert (turn_id(turn), user) in texts
        assert (turn_id(turn), answer) in texts
    assert len(FACTS) == 20
    assert len(QUERIES) >= 20
    assert {turn for _, turn in QUERIES} == {turn for turn, _, _ in FACTS}


def test_hybrid_ranking_finds_the_planted_turn_in_the_top_three(index: MemIndex) -> None:
    hybrid, hybrid_misses = recall(index, "hybrid")
    bm25, bm25_misses = recall(index, "bm25")
    print(f"\nmemsearch recall@{TOP} over {len(QUERIES)} paraphrased queries, {TURNS} turns:")
    print(f"  bm25   {bm25:.3f}  ({len(bm25_misses)} missed)")
    print(f"  hybrid {hybrid:.3f}  ({len(hybrid_misses)} missed)")
    for miss in hybrid_misses:
        print(f"  hybrid miss: {miss}")
    assert hybrid >= TARGET, "\n".join(hybrid_misses)


def ticket_queries() -> list[tuple[str, str]]:
    """``what happened in INC-nnnn?`` for every ticket id that appears in exactly one turn."""
    turns: dict[str, set[str]] = {}
    for row in conversation():
        for ticket in re.findall(r"INC-\d{4}", row["text"]):
            turns.setdefault(ticket, set()).add(row["turn_id"])
    return [
        (f"what happened in {t}?", min(ids)) for t, ids in sorted(turns.items()) if len(ids) == 1
    ]


def test_hybrid_ranking_keeps_exact_ticket_ids_first(index: MemIndex) -> None:
    """Incident turns all look alike to the model; only the id tells them apart."""
    queries = ticket_queries()
    assert len(queries) >= 5
    for query, turn in queries:
        hits = index.search(query, roles={"user", "assistant"}, top_k=TOP)
        assert hits[0].turn_id == turn, query
        assert hits[0].bm25 > 0
