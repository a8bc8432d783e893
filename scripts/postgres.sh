#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests (Debian's postgresql package; no
# download). Usage:
#
#   eval "$(scripts/postgres.sh start)"   # exports EDGEPIPE_TEST_DATABASE_URL and EDGEPIPE_PG_DIR
#   scripts/postgres.sh stop "$EDGEPIPE_PG_DIR"
#
# The cluster lives in a temporary directory owned by the postgres user
# (initdb refuses to run as root), listens on a free local TCP port and a
# socket in that directory, trusts local connections, and is removed by stop.
set -euo pipefail

find_bin() {
  if [ -n "${EDGEPIPE_PG_BIN:-}" ]; then echo "$EDGEPIPE_PG_BIN"; return; fi
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ]; then echo "$d"; fi
  done | sort -V | tail -n 1
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# free_port picks a port below the kernel's ephemeral range, probed free:
# initdb runs for seconds before postgres binds, and a port from the range
# could meanwhile go to any outgoing connection or :0 listener.
free_port() {
  python3 - <<'PY' 2>/dev/null || echo $(( 20000 + RANDOM % 10000 ))
import random, socket
try:
    first = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    first = 32768
lo, hi = (min(20000, first - 10000), first) if first > 11000 else (20000, 32768)
for _ in range(200):
    port = random.randrange(lo, hi)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit(1)
PY
}

cmd="${1:-}"
case "$cmd" in
start)
  bin="$(find_bin)"
  if [ -z "$bin" ]; then
    echo "postgres.sh: no PostgreSQL binaries under /usr/lib/postgresql (apt-get install -y postgresql)" >&2
    exit 2
  fi
  dir="$(mktemp -d /tmp/edgepipe-pg.XXXXXX)"
  chmod 755 "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  port="$(free_port)"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
  # fsync off: a test cluster that dies is thrown away anyway.
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "export EDGEPIPE_TEST_DATABASE_URL='$url'"
  echo "export EDGEPIPE_PG_DIR='$dir'"
  ;;
stop)
  dir="${2:-${EDGEPIPE_PG_DIR:-}}"
  if [ -z "$dir" ] || [ ! -d "$dir/data" ]; then
    echo "postgres.sh stop: no cluster directory given" >&2
    exit 2
  fi
  bin="$(find_bin)"
  as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
  rm -rf "$dir"
  ;;
*)
  echo "usage: scripts/postgres.sh start | stop DIR" >&2
  exit 2
  ;;
esac
