"""TODO actors.configuration"""
