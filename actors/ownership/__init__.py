"""TODO actors.ownership"""
