"""The FRESH query set of the memsearch recall benchmark (``memfixture``).

Written before any tuning, in a separate file, by someone who had not seen the ranking code:
this set was never used for tuning and is measured once at the end, so its recall is reported
as measured, not tuned for. Each entry is ``(query, planted turn)``, written in the way people
ask: paraphrases that share no content word with the planted fact (user and assistant text),
partial recall with only one detail remembered, questions about what only the assistant's
answer says, and questions that name a fact by its identifier or ask for one. None repeats or
closely paraphrases a query of ``memqueries_tuning``, ``memqueries_blind`` or
``memqueries_unseen``.
"""

from __future__ import annotations

QUERIES: list[tuple[str, int]] = [
    # 4: metrics exporter on port 9187 (answer only)
    ("what's occupying the usual slot on the hosts, forcing the stats endpoint elsewhere?", 4),
    ("was it 9187 or 9100 for the scraper?", 4),
    # 11: fire drill, third Thursday monthly, 2pm, car park on Elm Street
    ("which week is the one where we all troop outdoors?", 11),
    ("which road do we line up on when the alarm practice happens?", 11),
    # 17: OPS-2291, expired TLS certificate on the internal API gateway
    (
        "which problem was solved by swapping in a fresh security credential and bouncing the "
        "front proxy?",
        17,
    ),
    ("OPS-2291 ingress restart", 17),
    # 25: primary Postgres in eu-west-3 (Paris), read replica in eu-central-1
    # (answer only)
    ("the one with the French data centre, what's the standby zone called?", 25),
    ("what do we host in eu-west-3?", 25),
    # 33: vacation August 4-22, Elena approved, Tomasz covers on-call
    ("what day do I get back from my summer leave?", 33),
    ("Tomasz, what was he doing for me again?", 33),
    # 41: branch naming, PAY-4471-refund-rounding, release/YYYY.MM (answer only)
    ("what format do we use for shipping version lines in the repo?", 41),
    ("the PAY ticket we used as the example for branch names, what was its number?", 41),
    # 49: Brightwater, exports over 2 GB time out
    ("what's the size threshold where that client's downloads die?", 49),
    ("what was the Brightwater issue?", 49),
    # 56: coffee budget 150 euros a month, receipts to Sandra by the 5th (answer only)
    ("by which day do I hand in the cafe bills?", 56),
    ("what was the number for the coffee thing?", 56),
    # 63: staging Redis on cache-stg-04, cache-stg-03 decommissioned
    ("which server was switched off, forcing the pre-prod in-memory store to move?", 63),
    ("what replaced cache-stg-03?", 63),
    # 70: public API uploads capped at 25 MB, resumable multipart endpoint (answer only)
    ("what's the limit before I need the chunked transfer route?", 70),
    # 78: no production deploys after 3pm on Fridays
    ("that rule we made about pushing changes late in the week, what was the hour?", 78),
    # 85: logo by Okafor Studio in Lagos, two rounds of revisions (answer only)
    ("how many redo cycles does the branding agency's agreement allow?", 85),
    ("what did we hire Okafor for?", 85),
    # 92: BUG-7730, Android crash when rotating on the payment page
    ("what footage was requested from the testers for that checkout defect?", 92),
    ("BUG-7730 or BUG-7703, which one is the orientation crash?", 92),
    # 100: service account passwords >= 24 chars, rotated every 90 days; people use SSO
    # (answer only)
    ("how do humans sign in, if not with a secret phrase?", 100),
    ("what was the number on the service account thing, 24 something?", 100),
    # 107: Biscuit's vet appointment, next Tuesday 5:30, reminder an hour before
    ("how much warning will I get ahead of the animal's clinic visit?", 107),
    # 115: pipeline pinned to Python 3.11.9, 3.12 waits on the Spark connector (answer only)
    ("what's blocking the interpreter bump on the ETL?", 115),
    ("which project is pinned to 3.11.9?", 115),
    # 122: intern Amara, growth team, pricing experiments
    ("what's the junior hire going to research?", 122),
    # 129: on-call 250 euros per week standby, time off in lieu (answer only)
    ("is there extra rest owed if an overnight alarm drags on for ages?", 129),
    # 137: INC-5512, consumer deployment scaled to zero replicas
    ("what safeguards did we add after that backlog outage?", 137),
    ("INC-5512 consumer lag alert", 137),
    # 144: ADRs in docs/adr of the platform monorepo, ADR-0042 event sourcing (answer only)
    ("which design memo covers storing state as a stream of changes?", 144),
    ("which ADR number is the event sourcing one?", 144),
    # 151: guest network Visitors-5G, password card at reception (answer only)
    ("what's the SSID for people dropping by?", 151),
    ("when does the visitor wifi code get swapped?", 151),
    # 158: Portuguese, 20 minutes every morning with Duolingo
    ("how much time do I spend on the language app at breakfast?", 158),
    # 166: Postmark for transactional, Mailchimp for newsletters (answer only)
    ("can the promo mailer and the receipts provider sit on one domain?", 166),
    ("Mailchimp vs Postmark, which one does what?", 166),
    # 174: sprint demo moved to Wednesday 4pm, room Atlas
    ("who had to be told about the rescheduled review?", 174),
    ("what's happening in Atlas?", 174),
    # 183: 27 days paid leave, up to 5 unused days roll over (answer only)
    ("what's the PTO number for someone on a 100% contract?", 183),
    # 191: Ingrid Novak, data protection officer, 30 days (answer only)
    ("how quickly must we respond to someone wanting to be forgotten?", 191),
    ("what's Ingrid's role?", 191),
    # 197: expense reports within 60 days, 60-day limit added to the travel policy page
    ("where was the claims deadline written up?", 197),
]
