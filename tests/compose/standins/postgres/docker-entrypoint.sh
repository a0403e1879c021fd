#!/bin/bash
# The official postgres image's behaviour that docker-compose.yml relies on: on the first start
# (an empty $PGDATA) the cluster is initialised as UTF-8 with the superuser POSTGRES_USER and
# password POSTGRES_PASSWORD, the database POSTGRES_DB is created, the scripts in
# /docker-entrypoint-initdb.d (*.sh, *.sql) run against it as the postgres user, and other hosts
# may connect with a password (scram-sha-256); then `postgres` runs as the postgres user,
# listening on all addresses. Anything but `postgres …` as the command is run as given.
set -euo pipefail

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi

user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "docker-entrypoint: POSTGRES_PASSWORD is not set" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  chown postgres "$pwfile"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  as_postgres initdb --username="$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # A server on the socket only while initialising, as the official image does, so a health
  # check over TCP fails until the init scripts are done.
  as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$database" != postgres ]; then
    as_postgres psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres -q \
      -c "CREATE DATABASE \"$database\""
  fi
  export POSTGRES_USER="$user" POSTGRES_DB="$database"
  for script in /docker-entrypoint-initdb.d/*; do
    case "$script" in
      *.sh) echo "docker-entrypoint: running $script" >&2; as_postgres bash "$script" ;;
      *.sql) echo "docker-entrypoint: running $script" >&2
        as_postgres psql -v ON_ERROR_STOP=1 --username="$user" --dbname="$database" -q \
          -f "$script" ;;
    esac
  done
  as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "docker-entrypoint: initialised $PGDATA (user $user, database $database, UTF8)" >&2
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups "$@" -c listen_addresses='*'
