"""Transports: the in-memory one and the AWS providers (sqs/, sns/).

Each implements :mod:`runlane.ports.transport` or
:mod:`runlane.ports.topic_transport`; none imports the engine.
"""
