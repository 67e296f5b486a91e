#!/usr/bin/env bash
# The compose broker, secure by default (as scripts/stack_kafka.py's `make up` broker): SASL/SCRAM-SHA-256
# on the client listener, PLAIN (admin only) on the controller listener, the KRaft StandardAuthorizer with
# no access without an ACL, super user `admin`. The SCRAM users and their passwords come from the
# secrets volume (docker/secrets_init.py) and are added when the storage is formatted, on the first start.
set -euo pipefail
umask 077
SECRETS=${SECRETS_DIR:-/run/ballast-secrets}/kafka
DATA=/var/lib/kafka/data
CONF=/tmp/ballast-server.properties
# shellcheck disable=SC1091
source "$SECRETS/users.env"
cat > "$CONF" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@kafka:9093
controller.listener.names=CONTROLLER
listeners=SASL_PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=SASL_PLAINTEXT://kafka:9092
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="${ADMIN_PASSWORD}" user_admin="${ADMIN_PASSWORD}";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${ADMIN_PASSWORD}";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
log.dirs=${DATA}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
if [ ! -f "$DATA/meta.properties" ]; then
  /opt/kafka/bin/kafka-storage.sh format --cluster-id="$(/opt/kafka/bin/kafka-storage.sh random-uuid)" -c "$CONF" \
    --add-scram "SCRAM-SHA-256=[name=admin,password=${ADMIN_PASSWORD}]" \
    --add-scram "SCRAM-SHA-256=[name=controller,password=${CONTROLLER_PASSWORD}]" \
    --add-scram "SCRAM-SHA-256=[name=job,password=${JOB_PASSWORD}]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$CONF"
