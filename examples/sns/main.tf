# The orders topic on SNS: one SQS queue and dead-letter queue per subscription, each
# subscribed through its filter policy, and one Lambda function per subscription
# running consumer.handler behind an event source mapping with ReportBatchItemFailures.
#
#   python topology.py                        # after changing orders.py
#   terraform init && terraform apply -var lambda_zip=build/consumer.zip

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name."
  type        = string
  default     = "orders"
}

variable "lambda_zip" {
  description = "Zip of consumer.py and orders.py with runlane and pydantic (see README)."
  type        = string
}

variable "lambda_timeout" {
  description = "Seconds one invocation may run; the queues hide a received message at least this long."
  type        = number
  default     = 60
}

locals {
  # Written by topology.py from the subscription definitions in orders.py.
  topology      = jsondecode(file("${path.module}/topology.json"))
  subscriptions = local.topology.subscriptions
}

resource "aws_sns_topic" "orders" {
  name = var.name_prefix
}

resource "aws_sqs_queue" "dead_letters" {
  for_each                  = local.subscriptions
  name                      = "${var.name_prefix}-${each.value.queue}-dlq"
  message_retention_seconds = 1209600 # 14 days for an operator to replay or discard
}

resource "aws_sqs_queue" "subscription" {
  for_each                   = local.subscriptions
  name                       = "${var.name_prefix}-${each.value.queue}"
  visibility_timeout_seconds = var.lambda_timeout
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dead_letters[each.key].arn
    maxReceiveCount     = each.value.max_receive_count
  })
}

# SNS may send to each subscription queue, from this topic only.
data "aws_iam_policy_document" "from_topic" {
  for_each = local.subscriptions
  statement {
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.subscription[each.key].arn]
    principals {
      type        = "Service"
      identifiers = ["sns.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_sns_topic.orders.arn]
    }
  }
}

resource "aws_sqs_queue_policy" "from_topic" {
  for_each  = local.subscriptions
  queue_url = aws_sqs_queue.subscription[each.key].id
  policy    = data.aws_iam_policy_document.from_topic[each.key].json
}

resource "aws_sns_topic_subscription" "subscription" {
  for_each             = local.subscriptions
  topic_arn            = aws_sns_topic.orders.arn
  protocol             = "sqs"
  endpoint             = aws_sqs_queue.subscription[each.key].arn
  raw_message_delivery = true # the body is runlane's envelope, attributes arrive as SQS attributes
  filter_policy_scope  = "MessageAttributes"
  filter_policy        = each.value.filter_policy == null ? null : jsonencode(each.value.filter_policy)
}

# Each consumer may read and settle its own queue and write its own dead-letter queue.
data "aws_iam_policy_document" "assume_lambda" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "consumer" {
  for_each           = local.subscriptions
  name               = "${var.name_prefix}-${each.value.queue}-consumer"
  assume_role_policy = data.aws_iam_policy_document.assume_lambda.json
}

data "aws_iam_policy_document" "consumer" {
  for_each = local.subscriptions
  statement {
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
    ]
    resources = [aws_sqs_queue.subscription[each.key].arn]
  }
  statement {
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dead_letters[each.key].arn]
  }
  statement {
    actions   = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["arn:aws:logs:*:*:*"]
  }
}

resource "aws_iam_role_policy" "consumer" {
  for_each = local.subscriptions
  role     = aws_iam_role.consumer[each.key].id
  policy   = data.aws_iam_policy_document.consumer[each.key].json
}

resource "aws_lambda_function" "consumer" {
  for_each         = local.subscriptions
  function_name    = "${var.name_prefix}-${each.value.queue}"
  role             = aws_iam_role.consumer[each.key].arn
  runtime          = "python3.12"
  handler          = "consumer.handler"
  filename         = var.lambda_zip
  source_code_hash = filebase64sha256(var.lambda_zip)
  timeout          = var.lambda_timeout
  environment {
    variables = {
      RUNLANE_SUBSCRIPTION  = each.key
      QUEUE_URL             = aws_sqs_queue.subscription[each.key].url
      DEAD_LETTER_QUEUE_URL = aws_sqs_queue.dead_letters[each.key].url
    }
  }
}

resource "aws_lambda_event_source_mapping" "consumer" {
  for_each                = local.subscriptions
  event_source_arn        = aws_sqs_queue.subscription[each.key].arn
  function_name           = aws_lambda_function.consumer[each.key].arn
  batch_size              = 10
  function_response_types = ["ReportBatchItemFailures"]
}

output "topic_arn" {
  value = aws_sns_topic.orders.arn
}

output "queues" {
  description = "Per subscription, its queue and dead-letter queue URLs (for publisher.py)."
  value = {
    for name, _ in local.subscriptions : name => {
      queue_url             = aws_sqs_queue.subscription[name].url
      dead_letter_queue_url = aws_sqs_queue.dead_letters[name].url
    }
  }
}
