"""weighting_demo"""
