"""TODO actline.terminal"""
