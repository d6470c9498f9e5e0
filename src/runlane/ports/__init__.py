"""The seams: what the engine speaks to and what drivers and transports implement.

The storage protocol and its records, the wakeup and topic transport protocols,
their wire envelopes, and the lane that pairs a storage with a transport. A
third-party driver or transport imports this layer and the ones below it only.
"""
