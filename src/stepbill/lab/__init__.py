"""The seeds' optimizer, schedule, number-format and collective mechanics as pure functions."""
