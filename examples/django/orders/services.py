from decimal import Decimal

from django.db import transaction

from orders.jobs import enqueue, send_receipt
from orders.models import Order

DECLINED_CARD = "4000000000000002"


class PaymentDeclined(Exception):
    pass


@transaction.atomic
def place_order(email: str, total: Decimal, card: str) -> Order:
    """Store the order and its receipt run together; a declined card rolls back both."""
    order = Order.objects.create(email=email, total=total)
    enqueue(send_receipt, {"order_id": order.pk})
    charge(card, total)
    return order


def charge(card: str, amount: Decimal) -> None:
    """Stands in for a payment provider's API."""
    if card == DECLINED_CARD:
        raise PaymentDeclined(f"card ending {card[-4:]} was declined")
