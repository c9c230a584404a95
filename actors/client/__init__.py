"""TODO actors.client"""
