#!/usr/bin/env bash
# Installs what edgepipe needs at run time on a fresh Debian machine: ffmpeg
# (ffmpeg + ffprobe) and a C compiler for the SQLite driver. Does nothing when
# they are present.
set -euo pipefail
missing=()
command -v ffmpeg >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1 || missing+=(ffmpeg)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "edgepipe needs: ${missing[*]} — install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (apt)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
