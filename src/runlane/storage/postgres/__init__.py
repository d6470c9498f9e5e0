"""The PostgreSQL driver: the production storage, shared by many worker processes."""

from runlane.storage.postgres.driver import PostgresStorage

__all__ = ["PostgresStorage"]
