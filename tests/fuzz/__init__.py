"""Fuzzing of the parsers that take outside input: ``messages.decode``, the channel parser,
logical paths and turn configs.

``make test`` runs a short pass (``ACTLINE_FUZZ_EXAMPLES``, default 300 inputs per kind);
``make fuzz`` runs 100,000 per kind with fresh randomness and writes the tally to
``bench/results/fuzz.json``.
"""
