"""actline actors package (see DESIGN.md)."""
