"""MLflow tracking of runs and sweeps, as Hydra callbacks."""
