"""The bottom layer: stored vocabulary and leaf values.

Runs, their events and the records the storage protocol exchanges; errors, the
clock, durations, identifiers, storable text, trace carriers and the retry policy.
Nothing here imports another layer of Runlane, so every layer may import it.
"""
