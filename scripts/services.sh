#!/usr/bin/env bash
# Checks that the services the tests use answer (PostgreSQL and Redis on 127.0.0.1), and starts
# the ones that don't. Idempotent; prints one line per service.
set -u

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

wait_for() { # name, check function
  for _ in $(seq 1 50); do "$2" && return 0; sleep 0.2; done
  echo "services: $1 did not come up" >&2
  return 1
}

if pg_up; then
  echo "services: postgresql answers on 127.0.0.1:5432"
elif command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "services: starting postgresql"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  wait_for postgresql pg_up || exit 1
else
  echo "services: postgresql is not running and cannot be started here" >&2
  exit 1
fi

if redis_up; then
  echo "services: redis answers on 127.0.0.1:6379"
elif command -v redis-server >/dev/null 2>&1; then
  echo "services: starting redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for redis redis_up || exit 1
else
  echo "services: redis is not running and cannot be started here" >&2
  exit 1
fi
