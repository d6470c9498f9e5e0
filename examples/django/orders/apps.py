from django.apps import AppConfig
from django.db.models.signals import post_migrate


class OrdersConfig(AppConfig):
    name = "orders"

    def ready(self) -> None:
        # `manage.py migrate` creates or upgrades Runlane's schema too.
        post_migrate.connect(migrate_runlane, sender=self)


def migrate_runlane(**kwargs: object) -> None:
    from orders.jobs import rl

    rl.sync.migrate()
