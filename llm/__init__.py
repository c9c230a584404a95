"""actline llm package (see DESIGN.md)."""
