"""What the user states: models, devices and clusters, strategies, rates and ratios, catalogs."""
