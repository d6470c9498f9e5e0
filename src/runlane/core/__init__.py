"""The engine: runtime, producing, workers, attempts, maintenance and operator calls.

It speaks to storage and transports only through :mod:`runlane.ports`, and knows
no driver, no AWS and no surface.
"""
