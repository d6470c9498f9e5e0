"""The shop's Runlane runtime and tasks, and how views enqueue inside their transaction."""

from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from runlane import Context, RetryPolicy, Run, Runlane, TaskDef, postgres_lane, queue, task

emails = queue("emails", default=True)


@task("orders.send_receipt", retry=RetryPolicy(max_attempts=5, initial_delay="10s"))
def send_receipt(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Sync tasks run in worker threads, where the Django ORM works as usual."""
    from orders.models import Order

    order = Order.objects.get(pk=payload["order_id"])
    # A real shop sends the mail here (keyed on ctx.run_id, which is stable across retries).
    Order.objects.filter(pk=order.pk, receipt_sent_at=None).update(receipt_sent_at=timezone.now())
    return {"sent_to": order.email}


rl = Runlane(
    lane=postgres_lane(settings.RUNLANE_DATABASE_URL),
    queues=[emails],
    tasks=[send_receipt],
)


def enqueue(task: TaskDef[Any], payload: Any, **options: Any) -> Run:
    """Trigger on Django's own database connection.

    Inside ``transaction.atomic()`` the run is written in that transaction: it exists
    if and only if the transaction commits. Outside one, it commits at once.
    """
    connection.ensure_connection()
    run: Run = rl.sync.trigger(task, payload, connection=connection.connection, **options)
    return run
