"""The commands that read what nodes stored, without NATS: ``actline timeline`` (a stored
conversation, or the list of them) and ``actline trace`` (a turn's span tree)."""
