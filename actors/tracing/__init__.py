"""TODO actors.tracing"""
