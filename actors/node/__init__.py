"""TODO actors.node"""
