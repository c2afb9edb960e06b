# PostgreSQL 15 from Debian's packages, on the Debian-built base (containers/base.sh): a stand-in
# for compose.yaml's `postgres:16` where no registry can be reached. It takes the same
# interface as the official image (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB; data in
# /var/lib/postgresql/data; port 5432; pg_isready on PATH), so compose.yaml only swaps the image:
#   podman build --network host --build-arg BASE=localhost/interstice-base:bookworm \
#       -f containers/postgres.Dockerfile -t localhost/interstice-postgres:15 .
#   INTERSTICE_DB_IMAGE=localhost/interstice-postgres:15 podman-compose up ...
ARG BASE=localhost/interstice-base:bookworm
FROM ${BASE}

# no cluster at install: the entry point makes one in the volume, as the official image does
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf \
    && apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY containers/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh

ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=3s CMD pg_isready -h 127.0.0.1 -U "${POSTGRES_USER:-postgres}"
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
