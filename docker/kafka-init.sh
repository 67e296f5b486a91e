#!/usr/bin/env bash
# The input topic and the ACLs of the job in docker/jobs.yaml (`clicks`, input `clicks`), as admin: the
# same rules as scripts/stack_kafka.py's KafkaBroker.grant_job — `controller` may write `<job>.control`
# (and read its acks and signals, in group ballast-watch), `job` reads its input and its own topics, writes
# its acks/outputs/DLQ/signals, never
# `<job>.control`. Idempotent: an existing topic or ACL is kept.
set -euo pipefail
JOB=${INIT_JOB:-clicks}
INPUT=${INIT_INPUT_TOPIC:-clicks}
CFG=${SECRETS_DIR:-/run/ballast-secrets}/kafka/admin.properties
BIN=/opt/kafka/bin
BS=kafka:9092
"$BIN/kafka-topics.sh" --bootstrap-server "$BS" --command-config "$CFG" --create --if-not-exists \
  --topic "$INPUT" --partitions 4 --replication-factor 1
acl() { "$BIN/kafka-acls.sh" --bootstrap-server "$BS" --command-config "$CFG" --add "$@" >/dev/null; }
acl --allow-principal User:controller --operation Write --operation Create --topic "$JOB.control"
acl --allow-principal User:controller --operation Create --operation Read --topic "$JOB.control.acks"
# the rebalance DAG's asset watcher reads the job's signals as the controller, in its own group
acl --allow-principal User:controller --operation Create --operation Read --topic "$JOB.signals"
acl --allow-principal User:controller --operation Read --group ballast-watch
acl --allow-principal User:job --operation Read --topic "$INPUT"
acl --allow-principal User:job --operation Read --operation Write --operation Create --operation DescribeConfigs \
  --operation Alter --topic "$JOB." --resource-pattern-type prefixed
acl --deny-principal User:job --operation Write --operation Alter --topic "$JOB.control"
acl --allow-principal User:job --operation Write --operation Describe --transactional-id "ballast.$JOB." \
  --resource-pattern-type prefixed
acl --allow-principal User:job --operation Read --group spark-kafka-source- --resource-pattern-type prefixed
echo "kafka-init: topic $INPUT and the ACLs of job $JOB are in place"
