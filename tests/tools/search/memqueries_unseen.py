"""The UNSEEN query set of the memsearch recall benchmark (``memfixture``).

Written before any tuning, in a separate file, and never looked at while the ranking was
tuned on ``memqueries_tuning``: its recall is reported as measured, not tuned for. Each entry
is ``(query, planted turn)``. Most are paraphrases that share no key word with the fact; some
ask for an exact identifier; several ask about what only the assistant's answer says.
"""

from __future__ import annotations

QUERIES: list[tuple[str, int]] = [
    ("where do I point the monitoring scraper on the application boxes?", 4),
    ("when do we practise evacuating the office?", 11),
    ("what caused OPS-2291?", 17),
    ("in which geographic location is our main relational data store hosted?", 25),
    ("which database lives in France?", 25),
    ("who takes my pager duty while I'm on holiday?", 33),
    ("which manager okayed my summer break?", 33),
    ("how should I call a new line of development in version control?", 41),
    ("what is PAY-4471 about?", 41),
    ("which client had problems with large downloads failing?", 49),
    ("how much can each squad spend on beverages?", 56),
    ("what's the hostname of the pre-prod cache server?", 63),
    ("is cache-stg-04 still in use?", 63),
    ("how big can a file be when sent through our external interface?", 70),
    ("is there a time after which we can't release at the end of the week?", 78),
    ("which agency made our brand mark?", 85),
    ("status of BUG-7730?", 92),
    ("what happens when a phone is turned sideways during checkout?", 92),
    ("how long must a robot account's secret be?", 100),
    ("when is the pet's check-up?", 107),
    ("what's the name of my dog?", 107),
    ("which interpreter release is the ETL job locked to?", 115),
    ("who is the new trainee joining, and which team?", 122),
    ("how are people rewarded for carrying the pager?", 129),
    ("summarise INC-5512", 137),
    ("why did messages pile up in the broker during that outage?", 137),
    ("where are design decisions written down?", 144),
    ("what does ADR-0042 decide?", 144),
    ("how do visitors get internet access?", 151),
    ("which language am I studying, and how often?", 158),
    ("which provider delivers our receipts and password-reset mails?", 166),
    ("where and when is the end-of-iteration showcase?", 174),
    ("how much paid time off do staff receive per year?", 183),
    ("what's the rule about leftover holiday at year end?", 183),
    ("which Android defect was reported about the payment screen?", 92),
    ("who is the compliance contact for customer data deletion requests?", 191),
    ("what's the deadline for expense claims?", 197),
]
