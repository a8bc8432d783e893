# edgepipe on the local Debian bookworm base: the binary is built on the host
# with cgo (mattn/go-sqlite3) and links bookworm's glibc dynamically; ffmpeg,
# the edgepipe user (uid 10001) and /data come from the base. docker/images.sh
# supplies the build context (this file and the binary), so a rebuild is a
# single COPY.
ARG BASE_IMAGE=edgepipe-base:bookworm
FROM ${BASE_IMAGE}
COPY edgepipe /usr/local/bin/edgepipe
ENV EDGEPIPE_ADDR=0.0.0.0:8080 \
    EDGEPIPE_DATA_DIR=/data
# A named volume starts as a copy of the image's /data, so it is owned by
# edgepipe too.
VOLUME ["/data"]
WORKDIR /data
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=2s --timeout=2s --start-period=5s --retries=30 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/edgepipe"]
CMD ["serve"]
