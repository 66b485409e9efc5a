"""What Hora's Spark estimators share: the store, the data path from DataFrame to ranks, the
Spark ML parameters, the backend that runs the ranks and the estimator and model bases."""
