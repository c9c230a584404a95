"""TODO timeline.rendering"""
