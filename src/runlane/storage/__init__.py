"""Storage drivers: the shared SQL layer (sql/) and one package per dialect.

Each implements :mod:`runlane.ports.storage`; none imports the engine.
"""
