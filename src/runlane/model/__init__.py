"""Definitions and pure rules, above the vocabulary and below everything that does I/O.

Queue, task and schedule definitions, cron slots, payload rules, the run-state
transitions, capacity arithmetic and the task's :class:`Context`. Drivers,
transports, topics and the engine all apply these rules; none of them is written
twice.
"""
