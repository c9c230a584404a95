"""Tests of embeddings."""
