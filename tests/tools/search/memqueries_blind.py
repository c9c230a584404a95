"""The BLIND query set of the memsearch recall benchmark (``memfixture``).

Written before any ranking code was changed, after the totals of
``memqueries_unseen`` had been seen while tuning: this third set was never used to choose
anything, so its recall is the honest estimate. Each entry is ``(query, planted turn)``, the
same kinds as the other sets: paraphrases sharing no key word with the fact, facts that only
the assistant's answer holds, and exact identifiers.
"""

from __future__ import annotations

QUERIES: list[tuple[str, int]] = [
    ("what endpoint number do the app servers publish their statistics on?", 4),
    ("when is the monthly evacuation rehearsal, and where do we assemble outside?", 11),
    ("what was behind OPS-2291?", 17),
    ("why did our internal entry point for services go down?", 17),
    ("which datacentre city holds the main SQL cluster?", 25),
    ("who stands in for my night duties during my summer leave?", 33),
    ("what prefix should a fresh code line in the repository start with?", 41),
    ("PAY-4471 refund rounding", 41),
    ("which client keeps failing to pull bulk extracts?", 49),
    ("who gets the slips for our snack spending?", 56),
    ("how much money per month does a squad get for drinks?", 56),
    ("which machine holds the key-value store for pre-production?", 63),
    ("what runs on cache-stg-04?", 63),
    ("what is the cap on document sizes sent to our programmatic endpoint?", 70),
    ("is there a cut-off hour for shipping on the last day of the week?", 78),
    ("who drew our brand emblem?", 85),
    ("what is BUG-7730?", 92),
    ("which fault happens when the handset flips to landscape while paying?", 92),
    ("what length do credentials for non-human logins need?", 100),
    ("when does Biscuit see the veterinarian?", 107),
    ("when is my pet's medical visit?", 107),
    ("which exact interpreter build does the ETL run?", 115),
    ("what will the newcomer be working on, and with which squad?", 122),
    ("what is the weekly payment for being on standby?", 129),
    ("what went wrong in INC-5512?", 137),
    ("which outage came from a service scaled down to nothing?", 137),
    ("in which folder are architecture choices recorded?", 144),
    ("which decision record is ADR-0042?", 144),
    ("how can guests get onto the wireless?", 151),
    ("what am I doing daily to get ready for the journey abroad?", 158),
    ("which tool do we use for marketing mailings?", 166),
    ("when and in which room do we present the iteration results?", 174),
    ("how many days off does a full-timer get each year?", 183),
    ("how much unused vacation rolls into next year?", 183),
    ("who is our privacy officer?", 191),
    ("who should I contact when a customer wants their information removed?", 191),
    ("within how many days must I hand in receipts to get my money back?", 197),
    ("how long can I wait before submitting costs for repayment?", 197),
]
