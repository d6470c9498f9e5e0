"""Transports: wakeup delivery behind a small protocol; providers (sqs/) behind it."""
