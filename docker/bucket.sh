#!/usr/bin/env bash
# Looks at the bucket of the docker-compose stack from the host, with nothing
# but curl (SigV4 signing, curl >= 7.75): no mc, no AWS CLI needed.
#
#   docker/bucket.sh ls [PREFIX]       size and key of every object (e.g. ls renders/)
#   docker/bucket.sh get KEY [FILE]    download one object (default: its base name)
#
# Environment: EP_MINIO_PORT (9000), MINIO_ROOT_USER / MINIO_ROOT_PASSWORD
# (minioadmin), EDGEPIPE_S3_BUCKET (edgepipe) — the same knobs as
# docker-compose.yml. The MinIO console is at http://127.0.0.1:9001 too.
set -euo pipefail

endpoint="http://127.0.0.1:${EP_MINIO_PORT:-9000}"
bucket="${EDGEPIPE_S3_BUCKET:-edgepipe}"
auth=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "${MINIO_ROOT_USER:-minioadmin}:${MINIO_ROOT_PASSWORD:-minioadmin}")

usage() { sed -n '5,6p' "$0" | sed 's/^# *//' >&2; exit 2; }

case "${1:-}" in
ls)
  prefix="${2:-}"
  token=""
  while :; do
    query="list-type=2&prefix=$(printf %s "$prefix" | sed 's|/|%2F|g')"
    [ -z "$token" ] || query="$query&continuation-token=$(printf %s "$token" | sed 's|+|%2B|g;s|/|%2F|g;s|=|%3D|g')"
    xml=$(curl -fsS "${auth[@]}" "$endpoint/$bucket?$query")
    # One <Contents> per line, then print "size<TAB>key".
    printf '%s\n' "$xml" | sed 's|<Contents>|\n|g' | sed -n 's|.*<Key>\([^<]*\)</Key>.*<Size>\([0-9]*\)</Size>.*|\2\t\1|p'
    printf '%s' "$xml" | grep -q '<IsTruncated>true</IsTruncated>' || break
    token=$(printf '%s' "$xml" | sed -n 's|.*<NextContinuationToken>\([^<]*\)</NextContinuationToken>.*|\1|p')
  done
  ;;
get)
  [ -n "${2:-}" ] || usage
  out="${3:-$(basename "$2")}"
  curl -fsS "${auth[@]}" -o "$out" "$endpoint/$bucket/$2"
  echo "$out"
  ;;
*) usage ;;
esac
