"""TODO timeline.editing"""
