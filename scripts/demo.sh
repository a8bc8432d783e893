#!/usr/bin/env bash
# The demo behind `make demo`: starts edgepipe (development mode, fake
# providers, SQLite + local object directory) in a throwaway data directory
# on a free loopback port, renders testdata/storyboards/demo.json on v1 and
# v2.json on v2, and prints what ffprobe sees in both MP4s. Exits non-zero if
# either job did not succeed or v2's MP4 lacks its caption track.
#
# Needs ffmpeg/ffprobe (scripts/setup.sh installs them), and Go unless
# bin/edgepipe is already built.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

for tool in ffmpeg ffprobe; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found: install ffmpeg (scripts/setup.sh, or apt-get install -y ffmpeg)"
done

BIN=bin/edgepipe
if command -v go >/dev/null 2>&1; then
  # Cheap when nothing changed (go build leaves an up-to-date binary alone),
  # and never a demo of stale code.
  say "building $BIN"
  CGO_ENABLED=1 go build -o "$BIN" ./cmd/edgepipe
elif [ ! -x "$BIN" ]; then
  die "$BIN is missing and Go is not installed to build it"
fi

# A clean environment: the demo runs on its own settings, not the caller's
# (a stray EDGEPIPE_TOKENS would turn development mode off). ffmpeg paths
# and the log level are kept.
while IFS= read -r var; do
  case "$var" in
    EDGEPIPE_FFMPEG | EDGEPIPE_FFPROBE | EDGEPIPE_LOG_LEVEL) ;;
    *) unset "$var" ;;
  esac
done < <(compgen -e | grep '^EDGEPIPE_' || true)

dir=$(mktemp -d "${TMPDIR:-/tmp}/edgepipe-demo.XXXXXX")
export EDGEPIPE_DATA_DIR="$dir/data"
log="$dir/serve.log"
pid=""
cleanup() {
  local rc=$?
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    # serve drains in-flight work first; do not wait forever.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -s "$log" ]; then
    printf '\ndemo: failed; the last lines of the server log (%s):\n' "$log" >&2
    tail -n 20 "$log" >&2
  fi
  printf '\ndemo: files are in %s (rm -rf it when done)\n' "$dir" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting edgepipe serve (data in $EDGEPIPE_DATA_DIR)"
# Port 0: the kernel picks a free port and serve logs the one it got, so no
# other process can take it between choosing and binding.
EDGEPIPE_ADDR=127.0.0.1:0 "$BIN" serve >"$log" 2>&1 &
pid=$!

addr=""
for _ in $(seq 1 300); do
  kill -0 "$pid" 2>/dev/null || die "edgepipe serve exited during start-up"
  addr=$(sed -n 's/.*msg="edgepipe serving" addr=\([^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || die "edgepipe serve did not start within 30s"
export EDGEPIPE_URL="http://$addr"

healthy() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 2 "$EDGEPIPE_URL/healthz"
  else
    # Plain bash, for machines without curl (in a subshell: a failed exec
    # redirection must not end the script).
    (
      exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || exit 1
      printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$addr" >&3
      IFS= read -r -t 2 status <&3 || exit 1
      [[ "$status" == *" 200 "* ]]
    )
  fi
}
for _ in $(seq 1 100); do
  healthy 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || die "edgepipe serve exited"
  sleep 0.1
done
healthy || die "GET $EDGEPIPE_URL/healthz never answered 200"
echo "demo: edgepipe is up at $EDGEPIPE_URL" >&2

failed=0

say "v1: edgepipe submit testdata/storyboards/demo.json --wait"
if ! "$BIN" submit testdata/storyboards/demo.json --wait --timeout 5m --out "$dir/demo.mp4"; then
  failed=1
fi

v2id="v2-demo-$(date +%s)-$RANDOM"
say "v2: edgepipe submit testdata/storyboards/v2.json --id $v2id --wait"
if ! "$BIN" submit testdata/storyboards/v2.json --id "$v2id" --wait --timeout 5m --out "$dir/v2.mp4"; then
  failed=1
fi

say "summary"
for f in demo v2; do
  if [ -s "$dir/$f.mp4" ]; then
    streams=$(ffprobe -v error -show_entries stream=codec_type,codec_name -of compact=p=0:nk=1 "$dir/$f.mp4" |
      awk -F'|' '{ printf "%s%s/%s", (NR > 1 ? ", " : ""), $2, $1 }')
    printf '%-5s %s  streams: %s\n' "$f" "$dir/$f.mp4" "$streams"
  else
    printf '%-5s no MP4\n' "$f"
  fi
done
# v1 and v2 must differ observably: v2 adds a mov_text caption track.
if [ -s "$dir/v2.mp4" ] && ! ffprobe -v error -select_streams s -show_entries stream=codec_name -of csv=p=0 "$dir/v2.mp4" | grep -qx mov_text; then
  echo "demo: v2's MP4 has no mov_text caption track" >&2
  failed=1
fi
if [ "$failed" -ne 0 ]; then
  echo "demo: FAILED" >&2
  exit 1
fi
echo "demo: OK — both jobs succeeded; play the files with ffplay or any video player" >&2
