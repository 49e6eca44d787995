"""Short training studies behind the profiles' settings: the calibration runs, variant runs and the diagnostics."""
