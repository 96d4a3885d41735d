#!/usr/bin/env bash
# Ensures PostgreSQL and Redis are installed, running and set up for outboxd
# on a Debian machine; with --test-tools also promtool (make rules),
# Chromium (the console's browser tests) and python3 (the Python consumer
# example's tests), which only make test needs. Safe
# to run again and again: it installs only what is missing, starts only what
# is stopped, and creates the role and database only when absent. Needs root
# (or sudo) only when it has to install or start.
set -euo pipefail

PG_ROLE=${OUTBOXD_PG_ROLE:-outboxd}
PG_PASSWORD=${OUTBOXD_PG_PASSWORD:-outboxd}
PG_DB=${OUTBOXD_PG_DB:-outboxd}
REDIS_PORT=${OUTBOXD_REDIS_PORT:-6379}
TEST_TOOLS=0
[ "${1:-}" = "--test-tools" ] && TEST_TOOLS=1

log() { echo "ensure-services: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi
}

apt_updated=0
apt_install() {
  if [ $apt_updated -eq 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "installing $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- Redis -----------------------------------------------------------------
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-cli >/dev/null 2>&1 || apt_install redis-tools
if ! redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  log "starting redis-server on 127.0.0.1:$REDIS_PORT"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" \
    --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/outboxd.log
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null
fi

# --- promtool (the alert rules' unit tests) ---------------------------------
# Debian's prometheus package ships it. Only promtool is used; where systemd
# runs, the package also enables its server (port 9090):
# `systemctl disable --now prometheus` if it is not wanted.
if [ $TEST_TOOLS -eq 1 ]; then
  command -v promtool >/dev/null 2>&1 || apt_install --no-install-recommends prometheus
fi

# --- Chromium (the operator console's browser tests, cmd/outboxd) ----------
# Debian's chromium package; the tests drive it headless through chromedp
# and skip, saying so, only where no chromium binary exists.
if [ $TEST_TOOLS -eq 1 ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || apt_install chromium
fi

# --- python3 (examples/consumer-python, tested by runner's TestPythonConsumer
# and TestRoutes) -------------------------------------------------------------
# Debian's python3 package; the example needs 3.11 or later and only the
# standard library.
if [ $TEST_TOOLS -eq 1 ]; then
  command -v python3 >/dev/null 2>&1 || apt_install --no-install-recommends python3
fi

# --- PostgreSQL ------------------------------------------------------------
command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
command -v psql >/dev/null 2>&1 || apt_install postgresql-client
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  log "starting PostgreSQL $ver"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || as_root pg_ctlcluster "$ver" main start
  for _ in $(seq 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
  pg_isready -h 127.0.0.1 -p 5432
fi

psql_su() { (cd / && as_postgres psql -v ON_ERROR_STOP=1 -qtAX "$@"); }
if [ "$(psql_su -c "SELECT 1 FROM pg_roles WHERE rolname='$PG_ROLE'")" != "1" ]; then
  log "creating role $PG_ROLE"
  psql_su -c "CREATE ROLE $PG_ROLE LOGIN CREATEDB PASSWORD '$PG_PASSWORD'"
fi
if [ "$(psql_su -c "SELECT 1 FROM pg_database WHERE datname='$PG_DB'")" != "1" ]; then
  log "creating database $PG_DB"
  psql_su -c "CREATE DATABASE $PG_DB OWNER $PG_ROLE"
fi
