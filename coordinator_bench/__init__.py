"""The benchmark suite of edit-coordinator (`edit-coordinator bench`): scenarios, baselines, reports and plots.

scenarios    the named, parameterised, seeded scenarios and their rows (quick variants too)
columns      the baselines and coordinator variants measured side by side, detected at run time
naive        the naive-lock baseline (redis-py Lock + mtime check)
plainhttp    the plain httpx client of the `http-plain` column
deployments  the Redis deployments of the `distributed` scenario (one server, Sentinel, Cluster)
fleetrun     the benchmark's worker entry point for `worker.fleet.Fleet(target=...)`: clients, CPU, RSS
raw          the bare in-process loop of `raw` rows (solo, http)
asyncrun     the asyncio harness (coroutines through `AsyncClient`, a ticker for the loop's stalls)
cells        one repetition of one cell: fresh root, run, oracle, resource figures
suite        the order of runs (interleaved repetitions), aggregation, JSON results, profiling of misses
targets      the issues' targets, met or missed and by how much (figures only for quick runs)
report       BENCHMARKS.md's generated part (its one writer); plots: the PNGs; summary: the end-of-run screen
cli          the `bench` subcommand
"""
