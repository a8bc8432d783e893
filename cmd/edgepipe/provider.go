package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"edgepipe/internal/app"
	"edgepipe/pipeline"
	"edgepipe/provider"
)

func init() {
	register("provider", "provider tools: declared contracts, probing an idempotency key (real calls, --yes) and the probes' proofs", providerCmd)
}

var providerHelp = fmt.Sprintf(`
Subcommands:
  contracts   print the declared contract (docs/design.md §6) of every provider, operation
              and model, with the models this configuration uses; ROUTED marks the
              provider each operation is sent to (EDGEPIPE_PROVIDER,
              EDGEPIPE_PROVIDER_IMAGE/_SPEECH/_VIDEO). Needs no credentials and
              calls nothing.
  probe OP    prove an idempotent_verified operation's key against the provider:
              %d billable requests (asks for --yes), records a dated proof.
  proofs      list the latest proof of every (provider, operation, model, endpoint) and
              whether it is fresh (EDGEPIPE_PROOF_MAX_AGE).`, provider.ProbeCalls)

func providerCmd(ctx context.Context, args []string) error { return osEnv().provider(ctx, args) }

func (e *cliEnv) provider(ctx context.Context, args []string) error {
	fs := newFlags("provider", "contracts [--why] | probe OP [--provider KIND] [--interval D] [--yes] | proofs", providerHelp)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs.SetOutput(e.stdout)
		fs.Usage()
		if len(args) == 0 {
			return fmt.Errorf("%w: a subcommand is required (contracts, probe, proofs)", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "contracts":
		return providerContracts(e.stdout, e.getenv, args[1:])
	case "probe":
		return e.providerProbe(ctx, args[1:])
	case "proofs":
		return e.providerProofs(ctx, args[1:])
	}
	return fmt.Errorf("%w: unknown subcommand %q (edgepipe provider --help lists them)", errUsage, args[0])
}

func providerContracts(w io.Writer, getenv func(string) string, args []string) error {
	fs := newFlags("provider contracts", "[--why]", `
Prints the declared retry contract of every (provider, operation, model).
sync: an ambiguous failure stops for a human; async_pollable: the external id
is persisted and polled, never resubmitted; idempotent_verified: retried with
the same key, but only while a fresh proof of edgepipe provider probe says
the provider honours it (otherwise run as sync); fail_closed: never retried
after a send.
Operation * stands for every operation not listed. NAME is the provider's name
in intent rows and object keys.`)
	why := fs.Bool("why", false, "also print why each contract was declared")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (edgepipe provider contracts --help)", errUsage, fs.Arg(0))
	}
	lines, err := app.Contracts(getenv)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tNAME\tOP\tMODEL\tCONTRACT\tROUTED")
	for _, l := range lines {
		routed := ""
		if l.Routed {
			routed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Kind, l.Provider, l.Op, l.Model, l.Contract, routed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *why {
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintf(w, "%s %s: %s\n", l.Kind, l.Op, l.Why)
		}
	}
	return nil
}

var probeHelp = fmt.Sprintf(`
Proves that OP honours its idempotency key, as the seeds did by hand: sends
OP's small fixed request (image: a 256x256 "edgepipe contract probe"; speech:
one short sentence; video_submit: a 1 s clip) twice, --interval apart, with
the same fresh Idempotency-Key and unit id "probe/<hex>", then once more under
another key (the control), and compares the answers (SHA-256 of the media,
or the video job ids) and, where the provider reports it (the fake's GET
/ledger), how often it billed the key. Verdict idempotent: the two keyed
answers equal and, where usage is reported, exactly one bill; where it is
not, the control's answer must differ (equal answers from a deterministic
model or a cache prove nothing). Anything else is not_idempotent. The dated
proof is recorded in the job store for the provider, operation, model and
endpoint (the API base URL, or "in-process" for the fake edgepipe starts
itself); OP runs under idempotent_verified only while the latest proof of
that endpoint says idempotent and is younger than EDGEPIPE_PROOF_MAX_AGE
(default %s), and under sync without one. Only operations declared
idempotent_verified can be probed (see edgepipe provider contracts); the
others send no key.

It spends real money: %d billable requests to the provider. Without --yes it
only says what it would send, calls nothing and exits 2. Exit status: 0
idempotent, 11 not_idempotent, 2 usage (also: no --yes, an operation that
cannot be probed), 1 anything else (a failed call proves nothing and records
nothing, but may have been billed).`, pipeline.DefaultProofMaxAge, provider.ProbeCalls)

func (e *cliEnv) providerProbe(ctx context.Context, args []string) error {
	fs := newFlags("provider probe", "OP [--provider KIND] [--interval D] [--yes]", probeHelp)
	fs.SetOutput(e.stderr)
	kind := fs.String("provider", "", "provider kind to probe (fake, workers-ai, replicate; default: the one OP is routed to)")
	interval := fs.Duration("interval", provider.DefaultProbeInterval, "pause between the requests")
	yes := fs.Bool("yes", false, fmt.Sprintf("send the %d billable requests", provider.ProbeCalls))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: OP is required: one of image, speech, video_submit (edgepipe provider probe --help)", errUsage)
	}
	op := fs.Arg(0)
	// Flags may follow OP.
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (edgepipe provider probe --help)", errUsage, fs.Arg(0))
	}
	if *interval <= 0 {
		return fmt.Errorf("%w: --interval must be positive, got %s", errUsage, *interval)
	}
	a, err := e.openApp(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	t, err := a.ProbeTarget(ctx, op, *kind)
	if errors.Is(err, pipeline.ErrInvalidInput) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	plan := fmt.Sprintf("%d billable requests to %s (%s, kind %s, at %s) for %s, %s apart", provider.ProbeCalls, t.Provider, t.Model, t.Kind, t.Endpoint, t.Op, *interval)
	if !*yes {
		fmt.Fprintf(e.stdout, "edgepipe provider probe sends %s; rerun with --yes\n", plan)
		return fmt.Errorf("%w: nothing sent: the probe spends money and needs --yes", errUsage)
	}
	store := e.proofStore(a)
	fmt.Fprintf(e.stdout, "probe: sending %s\n", plan)
	proof, err := a.Probe(ctx, t, store, provider.ProbeConfig{Interval: *interval, Clock: e.clock()})
	if proof.Verdict == "" {
		return err
	}
	fmt.Fprintf(e.stdout, "verdict: %s\ndetail: %s\n", proof.Verdict, proof.Detail)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "proof %d recorded at %s\n", proof.ID, proof.ProvedAt.UTC().Format(time.RFC3339))
	if proof.Verdict != pipeline.ProofIdempotent {
		return &codedError{code: exitNotIdempotent, err: fmt.Errorf("%s on %s is not idempotent: it runs under %s, its safe contract",
			proof.Op, proof.Provider, pipeline.ProofFallback)}
	}
	fmt.Fprintf(e.stdout, "%s on %s runs under %s until %s (EDGEPIPE_PROOF_MAX_AGE %s)\n", proof.Op, proof.Provider,
		pipeline.ContractIdempotentVerified, proof.ProvedAt.Add(a.Cfg.ProofMaxAge).UTC().Format(time.RFC3339), a.Cfg.ProofMaxAge)
	return nil
}

// proofStore is the job store (it keeps the proofs), or the test's.
// openApp opens the configured stores for a one-shot command; the caller
// closes it.
func (e *cliEnv) openApp(ctx context.Context) (*app.App, error) {
	cfg, log, err := e.loadConfig()
	if err != nil {
		return nil, err
	}
	return app.Open(ctx, cfg, log)
}

func (e *cliEnv) proofStore(a *app.App) pipeline.ProofStore {
	if e.proofs != nil {
		return e.proofs
	}
	return a.Store
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

func (e *cliEnv) clock() pipeline.Clock {
	if e.now == nil {
		return pipeline.SystemClock{}
	}
	return clockFunc(e.now)
}

func (e *cliEnv) providerProofs(ctx context.Context, args []string) error {
	fs := newFlags("provider proofs", "[--limit N]", fmt.Sprintf(`
Lists the latest proof of every (provider, operation, model, endpoint) that
was probed, the last recorded first: its verdict, when it was proved, its
age, and whether it is FRESH (idempotent and younger than
EDGEPIPE_PROOF_MAX_AGE, default %s). An idempotent_verified operation
without a fresh proof of its endpoint runs under sync. Calls no provider.`, pipeline.DefaultProofMaxAge))
	fs.SetOutput(e.stderr)
	limit := fs.Int("limit", pipeline.DefaultProofListLimit, fmt.Sprintf("list at most this many (1 to %d)", pipeline.MaxProofListLimit))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (edgepipe provider proofs --help)", errUsage, fs.Arg(0))
	}
	if *limit <= 0 || *limit > pipeline.MaxProofListLimit {
		return fmt.Errorf("%w: --limit must be 1 to %d, got %d", errUsage, pipeline.MaxProofListLimit, *limit)
	}
	a, err := e.openApp(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	proofs, err := e.proofStore(a).ListProofs(ctx, &pipeline.ListProofsParams{Limit: *limit})
	if err != nil {
		return err
	}
	if len(proofs) == 0 {
		fmt.Fprintln(e.stdout, "no proofs: run edgepipe provider probe OP --yes")
		return nil
	}
	now := e.clock().Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tOP\tMODEL\tENDPOINT\tVERDICT\tPROVED_AT\tAGE\tFRESH")
	for _, p := range proofs {
		fresh := "no"
		if p.Fresh(now, a.Cfg.ProofMaxAge) {
			fresh = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Provider, p.Op, p.Model, p.Endpoint, p.Verdict,
			p.ProvedAt.UTC().Format(time.RFC3339), age(now.Sub(p.ProvedAt)), fresh)
	}
	return tw.Flush()
}

// age is a duration as an operator reads it: 45s, 12m, 5h, 31d; a negative
// one (a proof from the future) keeps its sign.
func age(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%s%ds", sign, int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%s%dm", sign, int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%s%dh", sign, int(d/time.Hour))
	}
	return fmt.Sprintf("%s%dd", sign, int(d/(24*time.Hour)))
}
