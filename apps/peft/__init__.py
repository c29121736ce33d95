"""peft"""
