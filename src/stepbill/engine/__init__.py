"""The bill's arithmetic: pure functions from ModelSpec + Recipe to lines with value, unit and formula."""
