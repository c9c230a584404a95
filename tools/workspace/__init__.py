"""TODO tools.workspace"""
