"""actline tools package (see DESIGN.md)."""
