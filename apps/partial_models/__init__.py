"""partial_models"""
