"""Core: definitions, runtime, workers and pure run-state logic. Imports no driver."""
