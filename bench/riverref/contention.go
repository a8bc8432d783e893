package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSnapshot records machine-wide busy CPU time and this process's own CPU
// time, so a run can report how much CPU other processes took while it was
// being timed. This machine's two cores are shared with other builds, and a
// burn-down of a few seconds is easily halved by a neighbour's compile; the
// figure lets a reader discard such runs instead of averaging them in.
type cpuSnapshot struct {
	at      time.Time
	busy    time.Duration // all CPUs, non-idle, from /proc/stat
	ownUsed time.Duration // this process, user+system, from getrusage
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc/stat.
const clockTicks = 100

func takeCPUSnapshot() (cpuSnapshot, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuSnapshot{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuSnapshot{}, errors.New("/proc/stat: empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuSnapshot{}, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	var busy int64
	for i, v := range fields[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return cpuSnapshot{}, fmt.Errorf("/proc/stat: %w", err)
		}
		// Fields are user nice system idle iowait irq softirq steal guest
		// guest_nice; idle and iowait are not busy, and guest time is
		// already counted in user.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSnapshot{}, fmt.Errorf("getrusage: %w", err)
	}
	return cpuSnapshot{
		at:      time.Now(),
		busy:    time.Duration(busy) * time.Second / clockTicks,
		ownUsed: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}, nil
}

// othersCores returns the average number of cores that other processes kept
// busy between two snapshots, or -1 when it could not be measured.
func othersCores(before, after cpuSnapshot, errBefore, errAfter error) float64 {
	if errBefore != nil || errAfter != nil {
		return -1
	}
	wall := after.at.Sub(before.at)
	if wall <= 0 {
		return -1
	}
	others := (after.busy - before.busy) - (after.ownUsed - before.ownUsed)
	return max(0, others.Seconds()/wall.Seconds())
}

// quietCores is the share of the machine other processes may use for it to
// count as quiet: a little background (the init process, containerd) always
// runs.
const quietCores = 0.15

var errNotQuiet = errors.New("no quiet window")

// waitQuiet blocks until a one-second window in which other processes used
// under quietCores, or returns errNotQuiet after limit.
func waitQuiet(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		before, errB := takeCPUSnapshot()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		after, errA := takeCPUSnapshot()
		used := othersCores(before, after, errB, errA)
		if used < 0 {
			return fmt.Errorf("%w: cannot measure CPU use", errNotQuiet)
		}
		if used < quietCores {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %s (last window: %.2f cores)", errNotQuiet, limit, used)
		}
	}
}
