#!/usr/bin/env bash
# A local single-node Kafka broker (KRaft) whose only client listener is SASL_SSL: for testing
# SOLARIS clients with credentials. Separate from infra/kafka.sh (the plaintext dev broker) so
# that one stays exactly as it is; it uses the same jars (run infra/kafka.sh start once first).
#
#   infra/kafka_sasl.sh start|stop|status
#
# On first start it makes, under the data dir (mode 0700):
#   tls/ca.pem                a throwaway CA (PEM, for the Python clients), made with keytool
#   tls/broker.p12            the broker's key and certificate (SAN 127.0.0.1, localhost)
#   credentials.env           SOLARIS_* client settings of user "solaris" (source it, or read it)
# Users: "solaris" for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (same random password), and an
# "admin" PLAIN user for the broker itself (inter-broker, over TLS) and for adding the SCRAM
# users. Passwords are random and only in files, never on a command line (see add_scram_users).
#
# Env knobs (defaults in brackets):
#   SOLARIS_CACHE_DIR               [$HOME/.cache/solaris]
#   SOLARIS_KAFKA_PORT              [19092]  SASL_SSL listener on 127.0.0.1
#   SOLARIS_KAFKA_CONTROLLER_PORT   [19093]  KRaft controller listener on 127.0.0.1
#   SOLARIS_KAFKA_DATA_DIR          [$SOLARIS_CACHE_DIR/run/kafka-sasl-$PORT]
#   SOLARIS_KAFKA_HEAP              [512m]
#   SOLARIS_KAFKA_START_TIMEOUT     [120]    seconds to wait for "Kafka Server started"
#   SOLARIS_KAFKA_STOP_TIMEOUT      [30]     seconds between SIGTERM and SIGKILL
#   JAVA, KEYTOOL                   [java, keytool]
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_INFRA_DIR="$SCRIPT_DIR/kafka"
POM="$KAFKA_INFRA_DIR/pom.xml"
LOG4J_CONF="$KAFKA_INFRA_DIR/log4j2.properties"
SERVER_TEMPLATE="$KAFKA_INFRA_DIR/server.properties.in"

CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
PORT="${SOLARIS_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${SOLARIS_KAFKA_CONTROLLER_PORT:-19093}"
DATA_DIR="${SOLARIS_KAFKA_DATA_DIR:-$CACHE_DIR/run/kafka-sasl-$PORT}"
HEAP="${SOLARIS_KAFKA_HEAP:-512m}"
START_TIMEOUT="${SOLARIS_KAFKA_START_TIMEOUT:-120}"
STOP_TIMEOUT="${SOLARIS_KAFKA_STOP_TIMEOUT:-30}"
JAVA="${JAVA:-java}"
KEYTOOL="${KEYTOOL:-keytool}"

TLS_DIR="$DATA_DIR/tls"
SECRETS="$DATA_DIR/secrets"          # shell assignments: passwords (never printed)
CLIENT_ENV="$DATA_DIR/credentials.env"
PID_FILE="$DATA_DIR/kafka.pid"
SERVER_PROPS="$DATA_DIR/server.properties"
LOG_DIR="$DATA_DIR/logs"
OUT_LOG="$LOG_DIR/kafka.out"
KRAFT_DIR="$DATA_DIR/kraft-logs"

unset COLUMNS  # KAFKA-15413

log() { echo "[kafka-sasl] $*"; }
die() { echo "[kafka-sasl] ERROR: $*" >&2; exit 1; }

libs_dir() { echo "$CACHE_DIR/kafka-$(sha256sum "$POM" | cut -c1-12)/libs"; }

random_word() { head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24; }

make_secrets() {
  [[ -s "$SECRETS" ]] && return 0
  (umask 077; {
    echo "STORE_PASSWORD=$(random_word)"
    echo "ADMIN_PASSWORD=$(random_word)"
    echo "USER_PASSWORD=$(random_word)"
  } >"$SECRETS")
}

# A CA, the broker's certificate signed by it (SAN for 127.0.0.1 and localhost), a PKCS12
# keystore with the chain and a truststore with the CA; ca.pem for the Python clients.
make_certs() {
  [[ -s "$TLS_DIR/broker.p12" && -s "$TLS_DIR/ca.pem" ]] && return 0
  command -v "$KEYTOOL" >/dev/null || die "keytool not found (it comes with the JDK)"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  local san="SAN=ip:127.0.0.1,dns:localhost"
  # the store password reaches keytool through its environment, never its command line (ps)
  export SOLARIS_KT_STOREPASS="$STORE_PASSWORD"
  local -a kt=("$KEYTOOL" -storetype PKCS12 -storepass:env SOLARIS_KT_STOREPASS -noprompt)
  "${kt[@]}" -genkeypair -alias ca -keystore "$TLS_DIR/ca.p12" -keyalg RSA -keysize 2048 \
    -dname "CN=SOLARIS test CA" -ext bc:c -validity 30 2>/dev/null
  "${kt[@]}" -exportcert -rfc -alias ca -keystore "$TLS_DIR/ca.p12" -file "$TLS_DIR/ca.pem" 2>/dev/null
  "${kt[@]}" -genkeypair -alias broker -keystore "$TLS_DIR/broker.p12" -keyalg RSA \
    -keysize 2048 -dname "CN=localhost" -ext "$san" -validity 30 2>/dev/null
  "${kt[@]}" -certreq -alias broker -keystore "$TLS_DIR/broker.p12" -file "$TLS_DIR/broker.csr"
  "${kt[@]}" -gencert -rfc -alias ca -keystore "$TLS_DIR/ca.p12" -infile "$TLS_DIR/broker.csr" \
    -outfile "$TLS_DIR/broker.crt" -ext "$san" -ext "ku:c=digitalSignature,keyEncipherment" \
    -ext "eku=serverAuth,clientAuth" -validity 30
  "${kt[@]}" -importcert -alias ca -keystore "$TLS_DIR/broker.p12" -file "$TLS_DIR/ca.pem" \
    >/dev/null 2>&1
  "${kt[@]}" -importcert -alias broker -keystore "$TLS_DIR/broker.p12" \
    -file "$TLS_DIR/broker.crt" >/dev/null 2>&1
  "${kt[@]}" -importcert -alias ca -keystore "$TLS_DIR/truststore.p12" -file "$TLS_DIR/ca.pem" \
    >/dev/null 2>&1
  rm -f "$TLS_DIR/broker.csr"
}

write_config() {
  local tmpl jaas_scram jaas_plain
  tmpl="$(<"$SERVER_TEMPLATE")"
  tmpl="${tmpl//@PORT@/$PORT}"
  tmpl="${tmpl//@CONTROLLER_PORT@/$CONTROLLER_PORT}"
  tmpl="${tmpl//@LOG_DIRS@/$KRAFT_DIR}"
  jaas_scram="org.apache.kafka.common.security.scram.ScramLoginModule required"
  jaas_plain="org.apache.kafka.common.security.plain.PlainLoginModule required"
  (umask 077; {
    # The dev template minus its listener lines, then a SASL_SSL-only client listener.
    printf '%s\n' "$tmpl" | grep -vE \
      '^(listeners|advertised\.listeners|inter\.broker\.listener\.name|listener\.security\.protocol\.map)='
    cat <<EOF

# --- SASL_SSL (infra/kafka_sasl.sh) ---
listeners=SASL_SSL://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$PORT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas_scram;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$jaas_scram;
listener.name.sasl_ssl.plain.sasl.jaas.config=$jaas_plain username="admin" password="$ADMIN_PASSWORD" user_admin="$ADMIN_PASSWORD" user_solaris="$USER_PASSWORD";
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$STORE_PASSWORD
ssl.key.password=$STORE_PASSWORD
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS_DIR/truststore.p12
ssl.truststore.password=$STORE_PASSWORD
ssl.client.auth=none
EOF
  } >"$SERVER_PROPS")
  (umask 077; cat >"$CLIENT_ENV" <<EOF
SOLARIS_KAFKA_BOOTSTRAP=127.0.0.1:$PORT
SOLARIS_KAFKA_SECURITY_PROTOCOL=SASL_SSL
SOLARIS_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
SOLARIS_KAFKA_SASL_USERNAME=solaris
SOLARIS_KAFKA_SASL_PASSWORD=$USER_PASSWORD
SOLARIS_KAFKA_SSL_CAFILE=$TLS_DIR/ca.pem
EOF
  )
}

format_storage() {
  local libs="$1" cid
  [[ -f "$KRAFT_DIR/meta.properties" ]] && return 0
  cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' | sed 's/^-/A/')"
  "$JAVA" -Xmx256m -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$LOG_DIR" \
    -cp "$libs/*" kafka.tools.StorageTool format -t "$cid" -c "$SERVER_PROPS" \
    >>"$OUT_LOG" 2>&1 || { tail -n 30 "$OUT_LOG" >&2; die "storage format failed"; }
}

# SCRAM credentials live in the KRaft metadata log. They are added once the broker runs, by
# Kafka's ConfigCommand logged in as admin over PLAIN, reading every password from files only
# readable by us (--command-config, --add-config-file): `kafka-storage format --add-scram`
# would put them on a command line, which any local user can read in `ps`.
add_scram_users() {
  local libs="$1" admin_conf="$DATA_DIR/admin-client.properties" users="$DATA_DIR/scram-users"
  [[ -f "$DATA_DIR/.scram-done" ]] && return 0
  (umask 077; cat >"$admin_conf" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$ADMIN_PASSWORD";
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS_DIR/truststore.p12
ssl.truststore.password=$STORE_PASSWORD
EOF
  )
  local mechanism out rc
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do  # one mechanism per request (Kafka's rule)
    (umask 077; printf '%s=password=%s\n' "$mechanism" "$USER_PASSWORD" >"$users")
    rc=0
    out="$("$JAVA" -Xmx256m -Dlog4j2.configurationFile="$LOG4J_CONF" \
      -Dkafka.logs.dir="$LOG_DIR" -cp "$libs/*" kafka.admin.ConfigCommand \
      --bootstrap-server "127.0.0.1:$PORT" --command-config "$admin_conf" --alter \
      --entity-type users --entity-name solaris --add-config-file "$users" 2>&1)" || rc=$?
    rm -f "$users"
    out="${out//$USER_PASSWORD/<password>}"  # its errors quote the file's lines
    printf '%s\n' "$out" >>"$OUT_LOG"
    (( rc == 0 )) || { printf '%s\n' "$out" | tail -n 30 >&2; die "adding $mechanism failed"; }
  done
  touch "$DATA_DIR/.scram-done"
}

running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(tr -cd '0-9' <"$PID_FILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $SERVER_PROPS" || return 1
  echo "$pid"
}

cmd_start() {
  local pid libs
  if pid="$(running_pid)"; then
    log "already running (pid $pid, SASL_SSL 127.0.0.1:$PORT)"
    return 0
  fi
  libs="$(libs_dir)"
  [[ -f "$(dirname "$libs")/.complete" ]] || die "no Kafka jars in $libs: run infra/kafka.sh start once"
  command -v "$JAVA" >/dev/null || die "java not found (JDK 17+ needed)"
  mkdir -p "$DATA_DIR" "$LOG_DIR" "$KRAFT_DIR"
  chmod 700 "$DATA_DIR"
  make_secrets
  # shellcheck disable=SC1090
  . "$SECRETS"
  make_certs
  write_config
  format_storage "$libs"
  log "starting SASL_SSL broker on 127.0.0.1:$PORT (controller $CONTROLLER_PORT, data $DATA_DIR)"
  local mark_out mark_log
  mark_out="$(wc -c <"$OUT_LOG" 2>/dev/null || echo 0)"
  mark_log="$(wc -c <"$LOG_DIR/server.log" 2>/dev/null || echo 0)"
  nohup setsid "$JAVA" "-Xms$HEAP" "-Xmx$HEAP" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J_CONF" \
    -Dkafka.logs.dir="$LOG_DIR" -cp "$libs/*" kafka.Kafka "$SERVER_PROPS" \
    </dev/null >>"$OUT_LOG" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  local t0=$SECONDS
  while (( SECONDS - t0 < START_TIMEOUT )); do
    kill -0 "$pid" 2>/dev/null || { tail -n 40 "$OUT_LOG" >&2; die "broker exited during startup"; }
    if { tail -c +"$((mark_out + 1))" "$OUT_LOG"; tail -c +"$((mark_log + 1))" "$LOG_DIR/server.log"; } \
        2>/dev/null | grep -q "Kafka Server started"; then
      add_scram_users "$libs"
      log "ready after $((SECONDS - t0))s (pid $pid); client settings in $CLIENT_ENV"
      return 0
    fi
    sleep 0.5
  done
  cmd_stop
  die "broker did not start within ${START_TIMEOUT}s (log: $OUT_LOG)"
}

cmd_stop() {
  local pid waited=0
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT)"
    rm -f "$PID_FILE"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  while running_pid >/dev/null; do
    if (( waited >= STOP_TIMEOUT * 2 )); then
      kill -KILL "$pid" 2>/dev/null || true
      sleep 1
      break
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  rm -f "$PID_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    log "running: pid $pid, SASL_SSL 127.0.0.1:$PORT"
    return 0
  fi
  log "not running (port $PORT, data $DATA_DIR)"
  return 3
}

main() {
  [[ $# -eq 1 ]] || { echo "usage: $0 start|stop|status" >&2; exit 2; }
  mkdir -p "$DATA_DIR"
  exec 9>"$DATA_DIR/.lock"
  flock -w 300 9 || die "timed out waiting for the lock on $DATA_DIR"
  case "$1" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
  esac
}

main "$@"
