"""Benchmarks: each prints a table and writes JSON under bench/results/ (not part of make test)."""
