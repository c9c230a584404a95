"""TODO actors.conversation"""
