"""Tests of workspace."""
