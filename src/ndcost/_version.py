"""The package version, in one place: the package re-exports it and the console script prints it."""
__version__ = "0.1.0"
