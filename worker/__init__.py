"""Client side of edit-coordinator: clients and simulated agent sessions (fleets) for stress runs and
benchmarks."""
