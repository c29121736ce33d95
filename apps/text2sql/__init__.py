"""text2sql"""
