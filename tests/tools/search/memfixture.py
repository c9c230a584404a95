"""A second memsearch benchmark conversation: 200 turns, 27 planted facts, near-neighbour ids.

Written apart from ``test_memsearch_recall`` (whose conversation the ranking was first tuned
on): other filler topics, other facts. Each turn is a user row and an assistant row. Thirteen
facts live only in the assistant's answer (the user asks a general question). Six facts carry
an exact identifier (``OPS-2291``, ``PAY-4471``, ``cache-stg-04``, ``BUG-7730``,
``INC-5512``, ``ADR-0042``) while filler turns talk about near neighbours (``OPS-2290``,
``OPS-2219``, ``PAY-4417``, ``cache-stg-03``, ``BUG-7703``, ``INC-5521``, ...) in the same
words, so only the identifier tells them apart.

Queries: ``memqueries_tuning`` (the ranking was tuned on it) and ``memqueries_unseen`` (held
out). Deterministic for a seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

TURNS = 200
T0 = 1_810_000_000.0
SEED = 23

FACT_IDS = ("OPS-2291", "PAY-4471", "cache-stg-04", "BUG-7730", "INC-5512", "ADR-0042")
NEIGHBOUR_IDS = {
    "ops": ["OPS-2290", "OPS-2292", "OPS-2219", "OPS-2281"],
    "pay": ["PAY-4417", "PAY-4472", "PAY-4470", "PAY-4741"],
    "host": ["cache-stg-03", "cache-stg-05", "cache-prd-04", "db-stg-04"],
    "bug": ["BUG-7703", "BUG-7731", "BUG-7370", "BUG-7729"],
    "inc": ["INC-5521", "INC-5511", "INC-5152", "INC-5513"],
    "adr": ["ADR-0041", "ADR-0024", "ADR-0043"],
}

SLOTS: dict[str, list[str]] = {
    "lang": ["Python", "TypeScript", "Go", "Rust", "Kotlin"],
    "city": ["Oslo", "Madrid", "Krakow", "Dublin", "Bologna", "Ghent"],
    "food": ["lentils", "halloumi", "cauliflower", "prawns", "gnocchi", "black beans"],
    "person": ["Lena", "Ravi", "Chen", "Olu", "Marta", "Sven"],
    "team": ["payments", "search", "mobile", "infra", "analytics"],
    "sport": ["swimming", "cycling", "climbing", "yoga", "rowing"],
    "number": ["2", "3", "4", "6", "8"],
    "percent": ["70", "85", "92", "97"],
    "tool": ["Jira", "Notion", "Figma", "Grafana", "Sentry"],
    "day": ["Monday", "Tuesday", "Thursday"],
    "room": ["Orion", "Vega", "Lyra", "Draco"],
    "gift": ["a board game", "a plant", "a cookbook", "concert tickets"],
}

FILLER: list[tuple[list[str], list[str]]] = [
    (
        ["What's the status of {ops}?", "Can you write a short update on ticket {ops}?"],
        [
            "{ops} is still open: the API gateway returned errors after a certificate change and "
            "the ingress was restarted; the owner is {person}.",
            "Update on {ops}: the outage is mitigated, the root cause analysis is in progress "
            "and {person} from the {team} team owns the follow-up.",
        ],
    ),
    (
        ["Who is working on {pay}?", "Is {pay} merged yet?"],
        [
            "{person} picked up {pay}; the branch is named after the ticket and the refund "
            "rounding change is in review.",
            "{pay} is in review: the branch {pay}-fix touches the payment service and needs one "
            "more approval.",
        ],
    ),
    (
        ["The host {host} is at {percent}% disk, what should I clean?"],
        [
            "On {host}, rotate the logs and clear old snapshots first; the Redis dump files "
            "under /var/lib are usually the biggest culprits.",
            "Check {host} with du -sh on /var; staging cache hosts often keep stale Redis "
            "snapshots that can go.",
        ],
    ),
    (
        ["Triage {bug} please.", "Is {bug} a duplicate?"],
        [
            "{bug}: the mobile app crashes on the checkout screen for some users; it looks "
            "related to the screen layout code, assigned to the {team} team.",
            "{bug} looks like a duplicate of an older crash report on the payment page; I linked "
            "them and asked QA to retest on Android.",
        ],
    ),
    (
        ["Write the timeline for {inc}.", "Was {inc} customer-facing?"],
        [
            "{inc}: the message queue backed up for {number} hours after a deployment; "
            "consumers were scaled up and the backlog drained by the evening.",
            "Yes, {inc} delayed notifications for about {number} hours; the post-mortem is "
            "scheduled with the {team} team.",
        ],
    ),
    (
        ["Summarise {adr} for the newcomers."],
        [
            "{adr} records a decision of the platform team: the reasoning, the options "
            "considered and the consequences, kept in the docs folder.",
        ],
    ),
    (
        [
            "Why is my {lang} test suite so slow?",
            "How do I profile a {lang} service that uses too much memory?",
        ],
        [
            "Run the tests with timing output, find the slowest ones, and look for real network "
            "calls or sleeps; parallelise the rest.",
            "Take a heap profile under load, compare two snapshots and look at what keeps "
            "growing; caches without limits are the usual suspects.",
        ],
    ),
    (
        ["Plan a long weekend in {city} for me.", "Where should we eat in {city}?"],
        [
            "Friday evening in the old town, Saturday at the museums and a market, Sunday a "
            "walk by the water; {city} is easy on foot.",
            "In {city}, book a table at a small bistro near the centre and try the local "
            "bakery in the morning.",
        ],
    ),
    (
        ["Give me a quick dinner idea with {food}."],
        [
            "Roast the {food} with olive oil and spices, serve it over rice with yoghurt and "
            "herbs; about thirty minutes.",
        ],
    ),
    (
        ["Draft an email to {person} about moving our sync to {day}."],
        [
            "Hi {person}, would {day} work for our weekly sync instead? Same time, room "
            "{room}. Let me know if another slot suits you better.",
        ],
    ),
    (
        ["Book a meeting room for the {team} planning on {day}."],
        [
            "Room {room} is free on {day} afternoon for two hours; I added the {team} planning "
            "to the calendar.",
        ],
    ),
    (
        ["How do I get into a {sport} routine?"],
        [
            "Start with {number} short sessions a week, keep a log, and increase slowly; a "
            "class or a friend helps you keep going.",
        ],
    ),
    (
        ["Our marketing emails land in spam. Why?"],
        [
            "Check SPF, DKIM and DMARC for the sending domain, warm up new IPs slowly and "
            "remove addresses that bounce.",
        ],
    ),
    (
        ["How do I turn on two-factor login for {tool}?"],
        [
            "In {tool}, open your profile's security settings, enable two-factor "
            "authentication and store the recovery codes somewhere safe.",
        ],
    ),
    (
        ["The printer on the second floor jams again."],
        [
            "Open the rear tray, remove the stuck sheet, and use the heavier paper in the "
            "drawer; if it jams again, call facilities.",
        ],
    ),
    (
        ["Gift idea for {person}'s farewell?"],
        [
            "Something personal works best: {gift} and a card signed by the whole {team} team.",
        ],
    ),
    (
        ["How do we roll out a Kubernetes deployment safely?"],
        [
            "Use a rolling update with a readiness probe, a max surge of one, and watch the "
            "error rate; roll back with kubectl rollout undo.",
        ],
    ),
    (
        ["Explain the difference between a left join and an inner join."],
        [
            "An inner join keeps rows that match on both sides; a left join keeps every row of "
            "the left table and fills missing matches with NULL.",
        ],
    ),
    (
        ["Set up a {tool} dashboard for the {team} team's error rates."],
        [
            "Create a panel per service with the error rate over five minutes, add an alert at "
            "{percent} percent of the budget, and share it with the {team} channel.",
        ],
    ),
    (
        ["Should I refinance my mortgage now?"],
        [
            "Compare the total cost including fees over the years you plan to stay; a lower "
            "rate only pays off once the fees are recovered.",
        ],
    ),
]

FACTS: list[tuple[int, str, str]] = [
    (
        4,
        "Quick one: what port does the metrics exporter listen on?",
        "The Prometheus exporter on every app server listens on port 9187, not the default "
        "9100, because the node agent already takes 9100.",
    ),
    (
        11,
        "FYI, our building's fire drill is on the third Thursday of each month at 2pm; everyone "
        "meets at the car park on Elm Street.",
        "Thanks, I noted the drill schedule and the assembly point.",
    ),
    (
        17,
        "Ticket OPS-2291, what was the root cause?",
        "OPS-2291 was caused by an expired TLS certificate on the internal API gateway; "
        "renewing it and restarting the ingress fixed the outage.",
    ),
    (
        25,
        "Which cloud region is our main database in?",
        "The primary Postgres cluster runs in eu-west-3 (Paris), with a read replica in "
        "eu-central-1.",
    ),
    (
        33,
        "My manager Elena approved my vacation: I'm away from August 4 to August 22, and "
        "Tomasz covers my on-call shifts.",
        "Enjoy the time off; I noted the dates and that Tomasz is covering.",
    ),
    (
        41,
        "How do we name git branches here?",
        "Branches start with the ticket key and a short slug, like PAY-4471-refund-rounding; "
        "release branches are release/YYYY.MM.",
    ),
    (
        49,
        "The customer Brightwater complained that exports time out for files over 2 GB.",
        "I opened a ticket for the export time-outs and asked the data team to stream large "
        "files instead of building them in memory.",
    ),
    (
        56,
        "What's the coffee budget for the office?",
        "Each team gets 150 euros a month for coffee and snacks; receipts go to Sandra in "
        "finance by the 5th of the next month.",
    ),
    (
        63,
        "Remember that the staging Redis lives on host cache-stg-04 now, since cache-stg-03 was "
        "decommissioned.",
        "Noted, I updated the inventory so scripts point at the new staging Redis host.",
    ),
    (
        70,
        "What's the maximum upload size in the public API?",
        "Uploads through the public API are capped at 25 megabytes per file; bigger files must "
        "use the resumable multipart endpoint.",
    ),
    (
        78,
        "We adopted a new rule: no deploys to production after 3pm on Fridays.",
        "Understood, I added the Friday cut-off to the release checklist.",
    ),
    (
        85,
        "Who designed the new logo?",
        "The new logo was designed by Okafor Studio in Lagos; the contract includes two rounds "
        "of revisions.",
    ),
    (
        92,
        "Bug report BUG-7730: the Android app crashes when the user rotates the screen on the "
        "payment page.",
        "Logged it with the device list and asked QA for a screen recording of the crash.",
    ),
    (
        100,
        "What's the password policy for service accounts?",
        "Service account passwords need at least 24 characters and are rotated every 90 days "
        "by the vault job; people use SSO with hardware keys instead.",
    ),
    (
        107,
        "Our dog Biscuit has a vet appointment next Tuesday at 5:30.",
        "Added to your calendar with a reminder an hour before.",
    ),
    (
        115,
        "What version of Python does the data pipeline use?",
        "The data pipeline is pinned to Python 3.11.9; moving to 3.12 waits on the Spark "
        "connector.",
    ),
    (
        122,
        "The new intern, Amara, starts on Monday and will work with the growth team on the "
        "pricing experiments.",
        "Great, I prepared an onboarding checklist for her first week.",
    ),
    (
        129,
        "How are on-call hours compensated?",
        "On-call engineers get a flat 250 euros per week of standby plus time off in lieu for "
        "any night page that lasts over an hour.",
    ),
    (
        137,
        "Incident INC-5512 post-mortem: the queue backed up because a consumer deployment had "
        "its replicas set to zero.",
        "I drafted the post-mortem with a new alert on consumer lag and a check that blocks "
        "zero-replica deployments.",
    ),
    (
        144,
        "Where do we keep the architecture decision records?",
        "ADRs live in the docs/adr folder of the platform monorepo, numbered in order; ADR-0042 "
        "is the one about moving to event sourcing.",
    ),
    (
        151,
        "What's the wifi password for the guest network?",
        "The guest network is Visitors-5G and this quarter's password is printed on the card "
        "at reception; it changes on the first day of each quarter.",
    ),
    (
        158,
        "I want to learn Portuguese before the trip, so I'll practise 20 minutes every morning "
        "with Duolingo.",
        "Nice plan; short daily sessions stick better than long weekly ones.",
    ),
    (
        166,
        "Which vendor do we use for sending transactional emails?",
        "Transactional emails go through Postmark; marketing newsletters use Mailchimp, and "
        "the two must never share a sending domain.",
    ),
    (
        174,
        "The sprint demo was moved to Wednesday at 4pm in room Atlas.",
        "Updated the invite and let the stakeholders know.",
    ),
    (
        183,
        "How many annual leave days do employees get?",
        "Full-time staff get 27 days of paid leave plus public holidays; up to 5 unused days "
        "roll over to the next year.",
    ),
    (
        191,
        "Who handles GDPR deletion requests?",
        "Deletion requests go to Ingrid Novak, our data protection officer; she answers within "
        "30 days as the GDPR requires.",
    ),
    (
        197,
        "Finance says expense reports must be submitted within 60 days of the purchase, with "
        "receipts attached.",
        "Thanks, I added the 60-day limit to the travel policy page.",
    ),
]

ANSWER_ONLY = (4, 25, 56, 70, 85, 100, 115, 129, 144, 151, 166, 183, 191)
"""Facts whose content is only in the assistant's answer."""


def turn_id(i: int) -> str:
    return f"m{i:03d}"


def _fill(template: str, rng: random.Random, chosen: dict[str, str]) -> str:
    for name, values in (*NEIGHBOUR_IDS.items(), *SLOTS.items()):
        if "{" + name + "}" in template and name not in chosen:
            chosen[name] = rng.choice(values)
    return template.format(**chosen)


def conversation(seed: int = SEED) -> Iterator[dict[str, Any]]:
    """The index rows of the 200 turns: a user row and an assistant row per turn."""
    # The id topics come back often, so every neighbour id appears.
    extra = [0, 1, 3, 4]
    return synthetic(seed, TURNS, FACTS, FILLER, _fill, turn_id, extra, T0)


Fill = Callable[[str, random.Random, dict[str, str]], str]


def synthetic(
    seed: int,
    turns: int,
    facts: Sequence[tuple[int, str, str]],
    filler: Sequence[tuple[Sequence[str], Sequence[str]]],
    fill: Fill,
    name: Callable[[int], str],
    extra_topics: Sequence[int],
    start: float,
) -> Iterator[dict[str, Any]]:
    """A synthetic conversation's index rows (a user and an assistant row per turn): the
    ``facts`` at their turns, and between them filler turns on a topic other than the last
    one (``extra_topics`` come back more often), their slots filled by ``fill``."""
    rng = random.Random(seed)
    planted = {turn: (user, answer) for turn, user, answer in facts}
    ts = start
    previous = -1
    for i in range(turns):
        ts += rng.uniform(600, 36_000)
        if i in planted:
            user, answer = planted[i]
        else:
            topic = rng.choice([t for t in range(len(filler)) if t != previous] + [*extra_topics])
            previous = topic
            prompts, answers = filler[topic]
            chosen: dict[str, str] = {}
            user = fill(rng.choice(prompts), rng, chosen)
            answer = fill(rng.choice(answers), rng, chosen)
        tid = name(i)
        yield {"turn_id": tid, "role": "user", "ts": ts, "text": user, "path": f"ar:{tid}.user"}
        yield {
            "turn_id": tid,
            "role": "assistant",
            "ts": ts + 30,
            "text": answer,
            "path": f"ar:{tid}.assistant",
        }


ID_RE = re.compile(r"\b(?:[A-Z]{2,4}-\d{4}|cache-[a-z]{3}-\d\d|db-stg-\d\d)\b")


def id_queries(seed: int = SEED) -> list[tuple[str, str]]:
    """``what do we know about <id>?`` for every identifier that appears in exactly one turn
    (fact ids and the near neighbours the filler uses once)."""
    turns: dict[str, set[str]] = {}
    for row in conversation(seed):
        for found in ID_RE.findall(row["text"]):
            turns.setdefault(found, set()).add(row["turn_id"])
    return [
        (f"what do we know about {i}?", min(ids))
        for i, ids in sorted(turns.items())
        if len(ids) == 1
    ]
