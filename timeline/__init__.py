"""actline timeline package (see DESIGN.md)."""
