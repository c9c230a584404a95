"""TODO tools.sandbox"""
