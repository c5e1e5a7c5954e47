"""Pricing: estimate, estimate_many, recompute profiles and plans, pipeline balance, search."""
