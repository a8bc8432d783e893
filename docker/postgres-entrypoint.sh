#!/bin/sh
# Entrypoint of docker/postgres.Dockerfile. On the first start (empty
# $PGDATA) it runs initdb and creates POSTGRES_USER (LOGIN, not superuser)
# owning POSTGRES_DB, in single-user mode so nothing listens until the
# database is ready: pg_isready (the healthcheck) then means "usable".
# Every start ends in `exec postgres` listening on *:5432.
set -eu

if [ "${1:-postgres}" != postgres ]; then
  exec "$@"
fi
[ "$#" -gt 0 ] && shift

user="${POSTGRES_USER:-edgepipe}"
db="${POSTGRES_DB:-$user}"

die() { echo "postgres-entrypoint: $*" >&2; exit 1; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || die "POSTGRES_PASSWORD is required on the first start (the data directory is empty)"
  case "$user$db" in *[!A-Za-z0-9_]*) die "POSTGRES_USER and POSTGRES_DB may hold only letters, digits and _" ;; esac
  [ "$user" != postgres ] || die "POSTGRES_USER must not be postgres (that is the local superuser)"
  case "$POSTGRES_PASSWORD" in *'
'*) die "POSTGRES_PASSWORD must be one line" ;; esac
  echo "postgres-entrypoint: initdb in $PGDATA (role $user, database $db)"
  # The superuser postgres has no password and reaches the server only over
  # the container's Unix socket (peer); everyone else uses scram-sha-256.
  initdb -D "$PGDATA" -U postgres --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  cat >>"$PGDATA/pg_hba.conf" <<HBA
host all all 0.0.0.0/0 scram-sha-256
host all all ::/0 scram-sha-256
HBA
  # Single quotes in the password are doubled for the SQL literal.
  pw=$(printf '%s' "$POSTGRES_PASSWORD" | sed "s/'/''/g")
  printf '%s\n' \
    "CREATE ROLE \"$user\" LOGIN PASSWORD '$pw';" \
    "CREATE DATABASE \"$db\" OWNER \"$user\";" |
    postgres --single -D "$PGDATA" postgres >/dev/null
  unset pw
  echo "postgres-entrypoint: ready"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -c port=5432 "$@"
