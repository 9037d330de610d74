"""Load tests, the showdown, the benchmarks and the failure labs."""
