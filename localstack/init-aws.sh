#!/usr/bin/env bash
# Create Toki's DynamoDB tables and SQS queues in an AWS emulator (LocalStack,
# moto server) with the aws CLI. Idempotent: existing resources are kept and
# brought to the settings below (missing GSI added, TTL enabled, queue
# attributes set). Prints the queue URL on stdout; progress goes to stderr.
#
# Names follow the same variables as the Toki binaries:
#   TOKI_INDEX_TABLE (toki-reminders)  TOKI_DIRECTORY_TABLE (toki-tenants)
#   TOKI_QUEUE_NAME (toki-reminders)   TOKI_DLQ_NAME (toki-reminders-dlq)
# Endpoint/region: AWS_ENDPOINT_URL (default http://localhost:4566, LocalStack
# inside its container), or per service AWS_ENDPOINT_URL_DYNAMODB and
# AWS_ENDPOINT_URL_SQS (e.g. DynamoDB on moto, SQS on LocalStack), as the SDK
# reads them; AWS_REGION (default us-east-1). Credentials default to test/test.
#
# Used as LocalStack's ready.d hook (see docker-compose.yml) and from the host:
#   AWS_ENDPOINT_URL=http://127.0.0.1:4566 localstack/init-aws.sh
set -euo pipefail

: "${AWS_ENDPOINT_URL:=http://localhost:4566}"
: "${AWS_REGION:=${AWS_DEFAULT_REGION:-us-east-1}}"
: "${AWS_ACCESS_KEY_ID:=test}"
: "${AWS_SECRET_ACCESS_KEY:=test}"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
export AWS_PAGER=""

INDEX_TABLE="${TOKI_INDEX_TABLE:-toki-reminders}"
DIRECTORY_TABLE="${TOKI_DIRECTORY_TABLE:-toki-tenants}"
QUEUE_NAME="${TOKI_QUEUE_NAME:-toki-reminders}"
DLQ_NAME="${TOKI_DLQ_NAME:-toki-reminders-dlq}"

log() { echo "init-aws: $*" >&2; }

if ! command -v aws >/dev/null 2>&1; then
  log "the aws CLI is not on PATH (pip install awscli)"
  exit 1
fi

# The service's own endpoint when one is set, else the common one.
awsx() {
  local endpoint="${AWS_ENDPOINT_URL}"
  case "$1" in
    dynamodb) endpoint="${AWS_ENDPOINT_URL_DYNAMODB:-$endpoint}" ;;
    sqs) endpoint="${AWS_ENDPOINT_URL_SQS:-$endpoint}" ;;
  esac
  aws --endpoint-url "$endpoint" --region "${AWS_REGION}" --output text "$@"
}

# KEYS_ONLY as in infra/template.yaml: the code reads only pk and sk through it.
GSI_JSON='{"IndexName":"by_schedule","KeySchema":[{"AttributeName":"sched","KeyType":"HASH"},{"AttributeName":"sk","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}}'

table_exists() { awsx dynamodb describe-table --table-name "$1" --query Table.TableName >/dev/null 2>&1; }

ensure_index_table() {
  if table_exists "$INDEX_TABLE"; then
    log "table $INDEX_TABLE exists"
    local gsi
    gsi="$(awsx dynamodb describe-table --table-name "$INDEX_TABLE" \
      --query "Table.GlobalSecondaryIndexes[?IndexName=='by_schedule'].IndexName")"
    if [ "$gsi" != "by_schedule" ]; then
      log "adding GSI by_schedule to $INDEX_TABLE"
      awsx dynamodb update-table --table-name "$INDEX_TABLE" \
        --attribute-definitions AttributeName=sched,AttributeType=S AttributeName=sk,AttributeType=S \
        --global-secondary-index-updates "[{\"Create\":${GSI_JSON}}]" >/dev/null
    else
      local projection
      projection="$(awsx dynamodb describe-table --table-name "$INDEX_TABLE" \
        --query "Table.GlobalSecondaryIndexes[?IndexName=='by_schedule'].Projection.ProjectionType")"
      # A projection cannot change in place; an older ALL index works the same.
      [ "$projection" = KEYS_ONLY ] \
        || log "note: GSI by_schedule projects $projection (now KEYS_ONLY); delete the table to recreate it"
    fi
  else
    log "creating table $INDEX_TABLE (pk/sk, GSI by_schedule)"
    awsx dynamodb create-table --table-name "$INDEX_TABLE" \
      --billing-mode PAY_PER_REQUEST \
      --attribute-definitions AttributeName=pk,AttributeType=S AttributeName=sk,AttributeType=S AttributeName=sched,AttributeType=S \
      --key-schema AttributeName=pk,KeyType=HASH AttributeName=sk,KeyType=RANGE \
      --global-secondary-indexes "[${GSI_JSON}]" >/dev/null
  fi
  awsx dynamodb wait table-exists --table-name "$INDEX_TABLE"
  local ttl
  ttl="$(awsx dynamodb describe-time-to-live --table-name "$INDEX_TABLE" \
    --query TimeToLiveDescription.TimeToLiveStatus 2>/dev/null || echo UNKNOWN)"
  case "$ttl" in
    ENABLED|ENABLING) ;;
    *)
      log "enabling TTL on $INDEX_TABLE.expires_at"
      awsx dynamodb update-time-to-live --table-name "$INDEX_TABLE" \
        --time-to-live-specification Enabled=true,AttributeName=expires_at >/dev/null
      ;;
  esac
}

ensure_directory_table() {
  if table_exists "$DIRECTORY_TABLE"; then
    log "table $DIRECTORY_TABLE exists"
  else
    log "creating table $DIRECTORY_TABLE (tenant)"
    awsx dynamodb create-table --table-name "$DIRECTORY_TABLE" \
      --billing-mode PAY_PER_REQUEST \
      --attribute-definitions AttributeName=tenant,AttributeType=S \
      --key-schema AttributeName=tenant,KeyType=HASH >/dev/null
  fi
  awsx dynamodb wait table-exists --table-name "$DIRECTORY_TABLE"
}

# ensure_queue NAME ATTRIBUTES_JSON -> prints the queue URL
ensure_queue() {
  local name="$1" attrs="$2" url
  if url="$(awsx sqs get-queue-url --queue-name "$name" --query QueueUrl 2>/dev/null)"; then
    log "queue $name exists; setting attributes"
    awsx sqs set-queue-attributes --queue-url "$url" --attributes "$attrs" >/dev/null
  else
    log "creating queue $name"
    url="$(awsx sqs create-queue --queue-name "$name" --attributes "$attrs" --query QueueUrl)"
  fi
  printf '%s\n' "$url"
}

ensure_index_table
ensure_directory_table

DLQ_URL="$(ensure_queue "$DLQ_NAME" '{"MessageRetentionPeriod":"1209600"}')"
DLQ_ARN="$(awsx sqs get-queue-attributes --queue-url "$DLQ_URL" --attribute-names QueueArn --query Attributes.QueueArn)"
REDRIVE="{\\\"deadLetterTargetArn\\\":\\\"${DLQ_ARN}\\\",\\\"maxReceiveCount\\\":\\\"100\\\"}"
QUEUE_URL="$(ensure_queue "$QUEUE_NAME" \
  "{\"VisibilityTimeout\":\"60\",\"ReceiveMessageWaitTimeSeconds\":\"20\",\"RedrivePolicy\":\"${REDRIVE}\"}")"

log "ready: tables $INDEX_TABLE, $DIRECTORY_TABLE; queue $QUEUE_NAME -> DLQ $DLQ_NAME (maxReceiveCount 100, a backstop)"
printf '%s\n' "$QUEUE_URL"
