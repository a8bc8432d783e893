# MinIO server built from the Go module proxy (docker/images.sh), on the local
# base so no registry is needed. Same entrypoint contract as the public
# minio/minio image: arguments are the minio subcommand.
ARG BASE_IMAGE=edgepipe-base:bookworm
FROM ${BASE_IMAGE}
COPY minio /usr/local/bin/minio
# MinIO refuses to start without a writable $HOME for its config directory.
ENV HOME=/ \
    MINIO_ROOT_USER=minioadmin \
    MINIO_ROOT_PASSWORD=minioadmin
VOLUME ["/data"]
EXPOSE 9000 9001
HEALTHCHECK --interval=2s --timeout=2s --start-period=2s --retries=30 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:9000/minio/health/live || exit 1
ENTRYPOINT ["/usr/local/bin/minio"]
CMD ["server", "/data", "--address", ":9000", "--console-address", ":9001"]
