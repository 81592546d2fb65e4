"""irgrad training artifacts as Flower clients: the example app (README, "Training across a fleet")."""
