"""What the hardware can do: specs, counted work, occupancy and the roofline. Knows nothing of models."""
