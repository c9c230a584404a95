"""TODO actors.services"""
