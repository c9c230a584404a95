"""TODO tools.react"""
