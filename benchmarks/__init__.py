"""Benchmark scenarios, baselines, reports and plots for edit-coordinator."""
