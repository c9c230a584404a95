"""TODO actors.pools"""
