"""Conformance suites: import one into a test module and provide its fixtures."""
