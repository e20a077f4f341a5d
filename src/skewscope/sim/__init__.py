"""Cluster simulator: a discrete-event model of N instances x M DP ranks and its writers."""
