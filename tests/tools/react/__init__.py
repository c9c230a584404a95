"""Tests of react."""
