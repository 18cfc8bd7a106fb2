"""What a run is and what it did: the composed configuration, results.json and sweep reports."""
