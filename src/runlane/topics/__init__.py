"""Topics, subscriptions, outcomes and dead letters: the storage-free layer.

Definitions, attribute filters, keys, outcomes, publish validation, the delivery
state machine and the claim rules, as plain functions over plain data. The
runtime, the drivers and the operator API build on these; nothing here does I/O.
"""
