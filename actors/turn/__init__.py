"""TODO actors.turn"""
