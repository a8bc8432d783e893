# PostgreSQL for edgepipe's job store (storage/postgres), from Debian's
# `postgresql` package on the local bookworm base, so no registry is needed:
# the build's apt-get reaches the same Debian mirror the base was
# debootstrapped from (its /etc/apt/sources.list). docker/images.sh builds it.
#
# Environment (read on the first start, when the data directory is empty):
#   POSTGRES_USER      role edgepipe connects as (default edgepipe); it owns
#                      POSTGRES_DB but is not a superuser
#   POSTGRES_PASSWORD  its password (required; scram-sha-256 over TCP)
#   POSTGRES_DB        database created for it (default: POSTGRES_USER)
# Listens on 5432 on every interface; data in the volume /var/lib/postgresql/data.
ARG BASE_IMAGE=edgepipe-base:bookworm
FROM ${BASE_IMAGE}
# No cluster from the package's postinst (the entrypoint makes one in the
# volume) and no service started during the build.
RUN mkdir -p /etc/postgresql-common \
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
 && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d /usr/share/doc/* /usr/share/man/* \
 && ln -s "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)" /usr/lib/postgresql/bin \
 && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /run/postgresql \
 && chmod 0700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    POSTGRES_USER=edgepipe
# A named volume starts as a copy of the image's directory, owned by postgres.
VOLUME ["/var/lib/postgresql/data"]
USER postgres
EXPOSE 5432
# SIGINT is Postgres' fast shutdown; SIGTERM would wait for every client.
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=2s --start-period=5s --retries=30 \
  CMD pg_isready -q -h 127.0.0.1 -p 5432 -U "$POSTGRES_USER" -d "${POSTGRES_DB:-$POSTGRES_USER}" || exit 1
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
CMD ["postgres"]
