"""TODO tools.embeddings"""
