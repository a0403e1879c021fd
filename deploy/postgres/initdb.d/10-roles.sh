#!/bin/sh
# Run once by the postgres image when it initialises an empty data directory (its
# /docker-entrypoint-initdb.d convention), as the superuser over the local socket.
#
# Two login roles, so that no service process is a superuser:
#   pas      owns the database and its public schema: the migrate job connects as it, upgrades
#            the schema and grants pas_app (admission-service migrate with PAS_DB_APP_ROLE).
#   pas_app  the replicas connect as it: rows only (SELECT/INSERT/UPDATE/DELETE), no DDL.
set -eu
psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet \
  --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v database="$POSTGRES_DB" \
  -v owner_password="$PAS_DB_OWNER_PASSWORD" \
  -v app_password="$PAS_DB_APP_PASSWORD" <<'SQL'
CREATE ROLE pas LOGIN PASSWORD :'owner_password';
CREATE ROLE pas_app LOGIN PASSWORD :'app_password';
ALTER DATABASE :"database" OWNER TO pas;
ALTER SCHEMA public OWNER TO pas;
-- Only the owner creates objects (PostgreSQL 15 and later revoke this already).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON DATABASE :"database" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"database" TO pas_app;
SQL
