"""The shared vocabulary below core and the drivers: runs, their events and the
records the storage protocol exchanges. It imports neither core nor storage, so
both can import it without a cycle."""
