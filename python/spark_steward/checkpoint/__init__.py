"""Checkpoint store with repeatable cleanup (FLIP-270 with FLIP-194's retry strategies)."""
