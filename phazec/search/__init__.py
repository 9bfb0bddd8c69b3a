"""The co-search: the strategies (`strategies/`, registered in `driver`), the loop that evaluates their
batches (`loop`), the executors that run them (`executors/`), saved state, dominance and objective."""
