"""Helpers several test tiers and the benchmarks share (never shipped)."""
