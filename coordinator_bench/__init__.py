"""Benchmark scenarios, baselines, reports and plots for edit-coordinator (`edit-coordinator bench`).

scenarios   the named, parameterised, seeded scenarios and their rows (quick variants too)
columns     the baselines and coordinator variants measured side by side, detected at run time
naive       the naive-lock baseline (redis-py Lock + mtime check)
fleetrun    a thin adapter over worker.fleet: the benchmark's clients, per-worker CPU and RSS, cProfile
raw         the bare in-process loop of solo's `raw` row
cells       one repetition of one cell: fresh root, run, oracle, resource figures
suite       the order of runs (interleaved repetitions), aggregation, JSON results, profiling of misses
targets     the issue's targets, met or missed and by how much
report      the generated part of BENCHMARKS.md; plots: the PNGs; summary: the end-of-run screen
cli         the `bench` subcommand
*_bench     single-purpose benchmarks (engine, fleet, HTTP), each run on its own
"""
