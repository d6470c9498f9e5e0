from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    receipt_sent_at = models.DateTimeField(null=True)
