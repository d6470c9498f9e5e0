import json
from decimal import Decimal

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from orders.services import PaymentDeclined, place_order


@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    data = json.loads(request.body)
    try:
        order = place_order(data["email"], Decimal(data["total"]), data["card"])
    except PaymentDeclined as declined:
        return JsonResponse({"error": str(declined)}, status=402)
    return JsonResponse({"order_id": order.pk}, status=201)
