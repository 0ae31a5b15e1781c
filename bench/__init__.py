"""Benchmarks (`make bench`): each module's `main()` prints its figures next to a same-run
baseline and the ratio. They are not tests; docs/benchmarks.md records the figures."""
