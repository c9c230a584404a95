"""Tests of search."""
