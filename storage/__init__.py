"""actline storage package (see DESIGN.md)."""
