"""Measured runs, calibration and fitting, validation against published runs, launch flags, plots."""
