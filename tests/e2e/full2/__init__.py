"""The full program on one private copy of sim-2, deployed once for the package: the monitoring
checks, then the inference checks, each module's destructive steps after its read-only ones, and
the destroy last. Modules run in name order."""
