// Command edgepipe runs AI media-generation jobs: the API, the workers, the
// sweeper and the fake providers, and the client commands to drive them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"edgepipe/internal/app"
	"edgepipe/internal/cmalloc"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(context.Context, []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "edgepipe %s — storyboards in, playable MP4s out, retries that never pay twice.\n\n", version)
	fmt.Fprintln(w, "Usage: edgepipe COMMAND [flags]   (edgepipe COMMAND --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nConfiguration comes from EDGEPIPE_* environment variables (see README); unknown ones are refused.")
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// SQLite runs on the C allocator: keep its freed memory instead of
	// handing it back to the kernel after every transaction (package doc).
	cmalloc.Tune(os.Getenv("GLIBC_TUNABLES"), os.Getenv("MALLOC_TRIM_THRESHOLD_"))
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(os.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "edgepipe: unknown command %q (edgepipe --help lists them)\n", args[0])
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, args[1:])
	code := exitCode(err)
	if err != nil && code != exitOK && !errors.Is(err, errExit) {
		fmt.Fprintf(os.Stderr, "edgepipe %s: %s\n", args[0], oneLine(err))
	}
	return code
}

// exitCode is the exit status for a command's error: 0 for none (and for
// --help), 2 for a usage error, the status an error carries (a settled
// job, a timeout, a refused submission), else 1.
func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.Is(err, errUsage):
		return exitUsage
	}
	return exitError
}

// errExit signals a failure already reported to the user.
var errExit = errors.New("exit 1")

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// newFlags makes a FlagSet whose --help prints summary, usage and flags.
func newFlags(name, usageLine, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: edgepipe %s %s\n\n%s\n", name, usageLine, strings.TrimSpace(help))
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// loadConfig reads the command's EDGEPIPE_* settings; the logger writes to
// its stderr.
func (e *cliEnv) loadConfig() (app.Config, *slog.Logger, error) {
	cfg, err := app.FromEnv(e.getenv, e.environ)
	if err != nil {
		return cfg, nil, err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	return cfg, log, nil
}

// loadConfig reads EDGEPIPE_* settings.
func loadConfig() (app.Config, *slog.Logger, error) {
	cfg, err := app.FromEnv(os.Getenv, os.Environ())
	if err != nil {
		return cfg, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	return cfg, log, nil
}
