"""What is computed: kernel kinds, codecs and models, counted as hwmodels `Work` (no time here)."""
