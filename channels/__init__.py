"""actline channels package (see DESIGN.md)."""
