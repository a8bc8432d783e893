#!/usr/bin/env bash
# Builds the images edgepipe's docker-compose files and acceptance tests
# run on, from nothing but Debian's packages and the Go module proxy: the
# Docker engines we develop on cannot pull from any registry.
#
#   base      Debian bookworm (debootstrap minbase) + ffmpeg, ca-certificates,
#             curl, imported with `docker import`. Also the image the
#             acceptance tests run ffprobe in.
#   minio     the base + a MinIO server built with `go install`.
#   edgepipe  the base + bin/edgepipe built from this tree (cgo: it links the
#             base's glibc dynamically, hence the bookworm base).
#   postgres  the base + Debian's postgresql package (apt-get in a docker build,
#             from the mirror in the base's sources.list) and an entrypoint
#             that initdb's on first start (docker/postgres.Dockerfile).
#
# Every step is skipped when its result is already there (image present with
# the same inputs, binary cached), so a second run takes seconds.
#
# Environment (all optional). The image names are shared with
# docker-compose.yml and the acceptance tests; the IMAGES_* knobs belong to
# this script alone (edgepipe refuses unknown EDGEPIPE_* settings, so script
# knobs must not use that prefix).
#   EDGEPIPE_BASE_IMAGE   base image name      (default edgepipe-base:bookworm)
#   EDGEPIPE_MINIO_IMAGE  MinIO image name     (default edgepipe-minio:local)
#   EDGEPIPE_IMAGE        edgepipe image name  (default edgepipe:dev)
#   EDGEPIPE_POSTGRES_IMAGE  Postgres image name (default edgepipe-postgres:local)
#   EDGEPIPE_MINIO_BIN    cached MinIO server binary (default ~/.cache/edgepipe-bin/minio)
#   IMAGES_SOURCE         local (default): debootstrap + go install, no registry.
#                         registry: the base is `docker build` FROM
#                         $IMAGES_DEBIAN_IMAGE (default debian:bookworm-slim) + apt,
#                         and the MinIO image is `docker pull $EDGEPIPE_MINIO_IMAGE`
#                         (set it to a public tag, e.g. minio/minio:latest).
#   IMAGES_DEBIAN_MIRROR, IMAGES_DEBIAN_SECURITY_MIRROR
#                         apt mirrors for debootstrap (default: read from
#                         /etc/apt/sources.list*, else deb.debian.org)
#   IMAGES_EDGEPIPE_BIN   use this edgepipe binary instead of building ./cmd/edgepipe
#   IMAGES_CACHE_DIR      .deb cache and rootfs tarball (default ~/.cache/edgepipe-images)
#   IMAGES_FORCE=1        rebuild every image even if present
#
# Usage: docker/images.sh [base|minio|edgepipe|postgres ...]   (default: all four)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

BASE_IMAGE="${EDGEPIPE_BASE_IMAGE:-edgepipe-base:bookworm}"
MINIO_IMAGE="${EDGEPIPE_MINIO_IMAGE:-edgepipe-minio:local}"
APP_IMAGE="${EDGEPIPE_IMAGE:-edgepipe:dev}"
PG_IMAGE="${EDGEPIPE_POSTGRES_IMAGE:-edgepipe-postgres:local}"
SOURCE="${IMAGES_SOURCE:-local}"
DEBIAN_IMAGE="${IMAGES_DEBIAN_IMAGE:-debian:bookworm-slim}"
MINIO_BIN="${EDGEPIPE_MINIO_BIN:-$HOME/.cache/edgepipe-bin/minio}"
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
CACHE_DIR="${IMAGES_CACHE_DIR:-$HOME/.cache/edgepipe-images}"
FORCE="${IMAGES_FORCE:-0}"

# Bump when the base recipe changes, so cached base images are rebuilt.
BASE_RECIPE="bookworm-minbase-ffmpeg-curl-user-5"
BASE_PACKAGES="ffmpeg ca-certificates curl"
# The unprivileged user edgepipe runs as, and its data directory, live in the
# base: a RUN step in the edgepipe image would cost ~15 s on every rebuild.
BASE_USER_SETUP="{ getent group edgepipe >/dev/null || groupadd --system --gid 10001 edgepipe; } && { id edgepipe >/dev/null 2>&1 || useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin edgepipe; } && mkdir -p /data && chown 10001:10001 /data"

log() { printf '== images [%3ds]: %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'images: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker engine not reachable (is dockerd running?)"

case "$SOURCE" in local | registry) ;; *) die "IMAGES_SOURCE must be local or registry, not $SOURCE" ;; esac

# One build at a time (make images and the acceptance tests' TestMain may
# overlap); the second waits and then finds the work done.
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
flock 9

# label IMAGE KEY prints the value of one label, or nothing when the image or
# label is missing.
label() {
  docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The legacy builder needs no registry when FROM names a local image; BuildKit
# is not installed on these engines.
docker_build() {
  local out
  if ! out=$(DOCKER_BUILDKIT=0 docker build --quiet "$@" 2>&1); then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

# apt mirror of this machine (deb822 or one-line format), so debootstrap
# fetches from wherever apt already can.
detect_mirror() {
  local want=$1 uri
  uri=$(grep -rhoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+' \
    /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    grep -oE '[a-z]+://[^[:space:]]+' | grep -E "/${want}/?\$" | head -n1 || true)
  printf '%s' "${uri%/}"
}

build_base_debootstrap() {
  local mirror security tarball rootfs
  mirror="${IMAGES_DEBIAN_MIRROR:-$(detect_mirror debian)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  security="${IMAGES_DEBIAN_SECURITY_MIRROR:-$(detect_mirror debian-security)}"
  security="${security:-${mirror}-security}"
  tarball="$CACHE_DIR/rootfs-$BASE_RECIPE.tar"
  mkdir -p "$CACHE_DIR/debs"

  if [ ! -s "$tarball" ] || [ "$FORCE" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "debootstrap needs root (or set IMAGES_SOURCE=registry)"
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not installed: apt-get install -y debootstrap"
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/edgepipe-rootfs.XXXXXX")
    # shellcheck disable=SC2064
    trap "umount '$rootfs/var/cache/apt/archives' '$rootfs/proc' 2>/dev/null || true; rm -rf --one-file-system '$rootfs'" EXIT
    log "debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase --include=ca-certificates --cache-dir="$CACHE_DIR/debs" \
      bookworm "$rootfs" "$mirror" >"$CACHE_DIR/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $CACHE_DIR/debootstrap.log"
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
    chmod +x "$rootfs/usr/sbin/policy-rc.d"
    mount -t proc proc "$rootfs/proc" 2>/dev/null || true
    log "apt-get install $BASE_PACKAGES (in the chroot)"
    # The chroot's apt reuses the debootstrap cache so a rerun downloads nothing.
    mkdir -p "$CACHE_DIR/debs/partial"
    mount --bind "$CACHE_DIR/debs" "$rootfs/var/cache/apt/archives" 2>/dev/null || true
    chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 sh -ec "
      apt-get update -qq
      apt-get upgrade -y -qq
      apt-get install -y -qq --no-install-recommends $BASE_PACKAGES
      ffmpeg -hide_banner -version | head -n1
      $BASE_USER_SETUP
    " >>"$CACHE_DIR/debootstrap.log" 2>&1 || die "apt-get in the chroot failed; see $CACHE_DIR/debootstrap.log"
    umount "$rootfs/var/cache/apt/archives" 2>/dev/null || true
    umount "$rootfs/proc" 2>/dev/null || true
    # Trim what a container never reads; docker provides resolv.conf.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
      "$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
    : >"$rootfs/etc/resolv.conf"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    # Root filesystems of older recipes are of no further use.
    find "$CACHE_DIR" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$BASE_RECIPE.tar" -delete
    rm -rf --one-file-system "$rootfs"
    trap - EXIT
  else
    log "reusing cached root filesystem $tarball"
  fi

  log "docker import -> $BASE_IMAGE"
  local old
  old=$(image_id "$BASE_IMAGE")
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL org.edgepipe.base.recipe=$BASE_RECIPE" \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
  drop_replaced "$BASE_IMAGE" "$old"
}

build_base_registry() {
  log "docker build $BASE_IMAGE FROM $DEBIAN_IMAGE (registry mode)"
  docker_build -f docker/base.Dockerfile \
    --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
    --build-arg "PACKAGES=$BASE_PACKAGES" \
    --build-arg "USER_SETUP=$BASE_USER_SETUP" \
    --label "org.edgepipe.base.recipe=$BASE_RECIPE" \
    -t "$BASE_IMAGE" docker
}

ensure_base() {
  local have
  have=$(label "$BASE_IMAGE" org.edgepipe.base.recipe)
  if [ "$FORCE" != 1 ] && have_image "$BASE_IMAGE" && { [ -z "$have" ] || [ "$have" = "$BASE_RECIPE" ]; }; then
    log "base image $BASE_IMAGE present, skipped"
    return
  fi
  if [ "$SOURCE" = registry ]; then build_base_registry; else build_base_debootstrap; fi
}

# build_on_base NAME DOCKERFILE BINARY DEST: an image FROM the base holding
# one binary; skipped when the same binary already sits on the same base.
build_on_base() {
  local name=$1 dockerfile=$2 bin=$3 dest=$4 sum base_id ctx
  sum=$(sha256sum "$bin" | cut -d' ' -f1)
  base_id=$(image_id "$BASE_IMAGE")
  if [ "$FORCE" != 1 ] && [ "$(label "$name" org.edgepipe.binary.sha256)" = "$sum" ] &&
    [ "$(label "$name" org.edgepipe.base.id)" = "$base_id" ]; then
    log "$name present (binary ${sum:0:12}), skipped"
    return
  fi
  log "docker build $name"
  local old
  old=$(image_id "$name")
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/edgepipe-ctx.XXXXXX")
  cp "$dockerfile" "$ctx/Dockerfile"
  ln "$bin" "$ctx/$dest" 2>/dev/null || cp "$bin" "$ctx/$dest"
  if ! docker_build --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --label "org.edgepipe.binary.sha256=$sum" --label "org.edgepipe.base.id=$base_id" \
    -t "$name" "$ctx"; then
    rm -rf "$ctx"
    die "docker build $name failed"
  fi
  rm -rf "$ctx"
  drop_replaced "$name" "$old"
}

# drop_replaced NAME OLD_ID removes the image NAME pointed at before a
# rebuild, so rebuilds do not pile up dangling images (kept if in use).
drop_replaced() {
  if [ -n "$2" ] && [ "$2" != "$(image_id "$1")" ]; then
    docker rmi "$2" >/dev/null 2>&1 || true
  fi
}

ensure_minio() {
  if [ "$SOURCE" = registry ]; then
    [ -n "${EDGEPIPE_MINIO_IMAGE:-}" ] || die "registry mode: set EDGEPIPE_MINIO_IMAGE to a public MinIO image, e.g. minio/minio:latest"
    if [ "$FORCE" = 1 ] || ! have_image "$MINIO_IMAGE"; then
      log "docker pull $MINIO_IMAGE (registry mode)"
      docker pull -q "$MINIO_IMAGE" >/dev/null
    else
      log "MinIO image $MINIO_IMAGE present, skipped"
    fi
    return
  fi
  if [ ! -x "$MINIO_BIN" ]; then
    log "go install github.com/minio/minio@$MINIO_VERSION (slow once, then cached in $(dirname "$MINIO_BIN"))"
    mkdir -p "$(dirname "$MINIO_BIN")"
    CGO_ENABLED=0 GOBIN="$(dirname "$MINIO_BIN")" go install "github.com/minio/minio@$MINIO_VERSION"
  fi
  build_on_base "$MINIO_IMAGE" docker/minio.Dockerfile "$MINIO_BIN" minio
}

ensure_edgepipe() {
  local bin="${IMAGES_EDGEPIPE_BIN:-}"
  if [ -z "$bin" ]; then
    bin="$root/bin/edgepipe"
    log "go build ./cmd/edgepipe (cgo)"
    mkdir -p bin
    CGO_ENABLED=1 go build -o "$bin" ./cmd/edgepipe
  fi
  [ -x "$bin" ] || die "edgepipe binary $bin missing"
  build_on_base "$APP_IMAGE" docker/edgepipe.Dockerfile "$bin" edgepipe
  # The binary links the host's glibc dynamically: prove the base satisfies it
  # here rather than as a crash loop in compose.
  local missing
  missing=$(docker run --rm --entrypoint /bin/sh "$APP_IMAGE" -c 'ldd /usr/local/bin/edgepipe 2>&1' | grep -E 'not found' || true)
  [ -z "$missing" ] || die "edgepipe binary does not run on $BASE_IMAGE: $missing"
}

# ensure_postgres builds the Postgres image; skipped when the same recipe
# (Dockerfile + entrypoint) already sits on the same base. Unlike the other
# images it runs apt-get inside a docker build (the base's sources.list names
# the mirror), ~1 min once.
ensure_postgres() {
  local sum base_id ctx old
  sum=$(cat docker/postgres.Dockerfile docker/postgres-entrypoint.sh | sha256sum | cut -d' ' -f1)
  base_id=$(image_id "$BASE_IMAGE")
  if [ "$FORCE" != 1 ] && [ "$(label "$PG_IMAGE" org.edgepipe.recipe.sha256)" = "$sum" ] &&
    [ "$(label "$PG_IMAGE" org.edgepipe.base.id)" = "$base_id" ]; then
    log "$PG_IMAGE present (recipe ${sum:0:12}), skipped"
    return
  fi
  log "docker build $PG_IMAGE (apt-get install postgresql)"
  old=$(image_id "$PG_IMAGE")
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/edgepipe-ctx.XXXXXX")
  cp docker/postgres.Dockerfile "$ctx/Dockerfile"
  cp docker/postgres-entrypoint.sh "$ctx/postgres-entrypoint.sh"
  if ! docker_build --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --label "org.edgepipe.recipe.sha256=$sum" --label "org.edgepipe.base.id=$base_id" \
    -t "$PG_IMAGE" "$ctx"; then
    rm -rf "$ctx"
    die "docker build $PG_IMAGE failed"
  fi
  rm -rf "$ctx"
  drop_replaced "$PG_IMAGE" "$old"
  docker run --rm --entrypoint postgres "$PG_IMAGE" --version >&2 || die "$PG_IMAGE: postgres does not run"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(base minio edgepipe postgres)
start=$(date +%s)
ensure_base
for t in "${targets[@]}"; do
  case "$t" in
  base) ;;
  minio) ensure_minio ;;
  edgepipe) ensure_edgepipe ;;
  postgres) ensure_postgres ;;
  *) die "unknown target $t (want base, minio, edgepipe or postgres)" ;;
  esac
done
log "done in $(($(date +%s) - start))s: base=$BASE_IMAGE minio=$MINIO_IMAGE edgepipe=$APP_IMAGE postgres=$PG_IMAGE"
