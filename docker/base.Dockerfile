# Registry alternative to the debootstrap base (docker/images.sh with
# IMAGES_SOURCE=registry): the same Debian bookworm + ffmpeg + the edgepipe
# user, for engines that can pull public images. images.sh passes the
# package list and user setup so both recipes stay one.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
ARG PACKAGES="ffmpeg ca-certificates curl"
ARG USER_SETUP="true"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/* \
 && sh -ec "${USER_SETUP}"
ENV LANG=C.UTF-8
CMD ["/bin/bash"]
