"""TODO tools.search"""
