#!/bin/sh
# Entry point of containers/postgres.Dockerfile: on first start (an empty $PGDATA) make the
# cluster with POSTGRES_USER (superuser, password POSTGRES_PASSWORD) and POSTGRES_DB, as the
# official postgres image does; then run the given command (postgres) in the foreground,
# listening on every address with password (scram) authentication from the network.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    password_file="$(mktemp)"
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}" > "$password_file"
    initdb --username="$POSTGRES_USER" --pwfile="$password_file" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$password_file"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        postgres --single -D "$PGDATA" -j postgres >/dev/null <<SQL
CREATE DATABASE "$POSTGRES_DB" OWNER "$POSTGRES_USER";
SQL
    fi
    echo "postgres-entrypoint: cluster made in $PGDATA (user $POSTGRES_USER, db $POSTGRES_DB)"
fi
if [ "$1" = postgres ]; then
    shift
    exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
