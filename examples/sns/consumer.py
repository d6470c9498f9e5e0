"""The Lambda entry point of one subscription: ``consumer.handler``.

main.tf deploys this module once per subscription and tells it which one it
serves and where that subscription's queues are. No runtime and no database:
``create_sns_lambda_handler`` runs the handler on each SQS record and answers with
``batchItemFailures``.
"""

from __future__ import annotations

import logging
import os

import boto3
from orders import SUBSCRIPTIONS

from runlane.sns import create_sns_lambda_handler, sns_subscription

logging.getLogger("orders").setLevel(logging.INFO)

binding = sns_subscription(
    SUBSCRIPTIONS[os.environ["RUNLANE_SUBSCRIPTION"]],
    queue_url=os.environ["QUEUE_URL"],
    dead_letter_queue_url=os.environ["DEAD_LETTER_QUEUE_URL"],
)
handler = create_sns_lambda_handler(subscription=binding, client=boto3.client("sqs"))
