"""TODO actors.cluster"""
