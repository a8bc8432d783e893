package main

// CPU accounting of a Postgres burn-down: how much processor time the
// database server's backends and the worker processes spent per job. On a
// 2-core machine both compete for the same cores, so a side's wall-clock
// rate depends on the other's load, and a statement's duration in
// pg_stat_statements includes time spent waiting for a core; CPU time per
// job is what each side costs, whatever else runs. Read from /proc, so only
// on Linux and only with the server on this machine; otherwise the columns
// say "?".

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on every
// Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// procTimes reads /proc/<pid>/stat: the process's own CPU time (utime +
// stime), the CPU time of its children it has waited for (cutime + cstime),
// and its parent's pid.
func procTimes(pid int) (self, children time.Duration, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces; the
	// fields after the last ')' start with field 3 (state).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := make([]int64, 0, 4)
	for _, s := range f[11:15] { // fields 14-17: utime stime cutime cstime
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		n = append(n, v)
	}
	ppid, err = strconv.Atoi(f[1]) // field 4
	if err != nil {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(n[0]+n[1]) * clockTick, time.Duration(n[2]+n[3]) * clockTick, ppid, nil
}

// serverCPU measures the CPU time of a database's backends: the postmaster
// adds every backend's time to its own children's time when the backend
// exits, so the difference between two readings, each taken when no other
// backend is connected to the database, is what the backends in between
// spent. It is the whole cluster's reaped children: any autovacuum worker,
// or a backend of another database, that exits in between is counted too
// (run nothing else on the cluster), and the long-lived helpers (WAL
// writer, checkpointer, background writer) are never reaped and so never
// counted.
type serverCPU struct {
	conn       *pgx.Conn
	postmaster int
	start      time.Duration
}

// startServerCPU finds the postmaster through conn's own backend and takes
// the first reading once conn is the database's only backend. nil when the
// server is not on this machine or /proc cannot be read.
func startServerCPU(ctx context.Context, conn *pgx.Conn) *serverCPU {
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil
	}
	_, _, ppid, err := procTimes(backend)
	if err != nil || !isPostgres(backend) || !isPostgres(ppid) {
		return nil // not this machine's process (a server in a container or elsewhere)
	}
	sc := &serverCPU{conn: conn, postmaster: ppid}
	if !sc.quiesce(ctx) {
		return nil
	}
	var ok bool
	if sc.start, ok = sc.settled(); !ok {
		return nil
	}
	return sc
}

// quiesce waits up to five seconds for every other backend of the database
// to exit (and so be counted in the postmaster's children's time).
func (sc *serverCPU) quiesce(ctx context.Context) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := sc.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// used is the backends' CPU time since the first reading, once the worker
// processes' backends have exited; ok false when that could not be read.
func (sc *serverCPU) used(ctx context.Context) (time.Duration, bool) {
	if sc == nil || !sc.quiesce(ctx) {
		return 0, false
	}
	now, ok := sc.settled()
	if !ok {
		return 0, false
	}
	return now - sc.start, true
}

// settled reads the postmaster's children's time once it has stopped
// changing for 100 ms: a backend leaves pg_stat_activity before its process
// exits, and its time is added only when the postmaster reaps it.
func (sc *serverCPU) settled() (time.Duration, bool) {
	_, last, _, err := procTimes(sc.postmaster)
	if err != nil {
		return 0, false
	}
	deadline := time.Now().Add(5 * time.Second)
	for stable := 0; stable < 4 && time.Now().Before(deadline); {
		time.Sleep(25 * time.Millisecond)
		_, now, _, err := procTimes(sc.postmaster)
		if err != nil {
			return 0, false
		}
		if now == last {
			stable++
		} else {
			stable, last = 0, now
		}
	}
	return last, true
}

// isPostgres says whether pid is a process of a Postgres server (its
// command name), so that a backend pid the server reports is not taken for
// an unrelated process of this machine.
func isPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "postgres")
}

// workersCPU is the CPU time the worker processes have spent so far:
// with precise, from the scheduler's nanosecond count of each of their
// threads (threadsCPU), else from /proc/<pid>/stat's 10 ms ticks. A cheap
// side's small burn-down (300 jobs at 15 µs each) can take less than one
// tick, and the tick count then says it cost nothing; the two readings of
// a burn-down use one source (preciseCPU), so their difference is in one
// unit.
func workersCPU(children []*child, precise bool) (time.Duration, bool) {
	var total time.Duration
	for _, c := range children {
		var self time.Duration
		var err error
		if precise {
			self, err = threadsCPU(c.cmd.Process.Pid)
		} else {
			self, _, _, err = procTimes(c.cmd.Process.Pid)
		}
		if err != nil {
			return 0, false
		}
		total += self
	}
	return total, true
}

// preciseCPU says whether threadsCPU can measure every child: a process
// that has started has run for more than 0 ns, so a kernel whose schedstat
// says 0 (scheduler statistics off) cannot.
func preciseCPU(children []*child) bool {
	for _, c := range children {
		if d, err := threadsCPU(c.cmd.Process.Pid); err != nil || d <= 0 {
			return false
		}
	}
	return true
}

// threadsCPU sums the time on a CPU of every live thread of pid, from
// /proc/<pid>/task/*/schedstat (its first field, in nanoseconds). A
// thread that has exited is not counted; a Go program's threads live as
// long as it does, bar the rare one a locked goroutine takes with it.
func threadsCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, t.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// perJob formats a CPU time per job in microseconds, or "?".
func perJob(d time.Duration, ok bool, jobs int) string {
	if !ok || jobs == 0 {
		return "?"
	}
	return strconv.FormatInt(d.Microseconds()/int64(jobs), 10)
}
