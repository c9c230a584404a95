"""TODO actors.agents"""
