"""Specs turned into the flat arrays the kernels read: layouts, derived values, formulas, tables."""
