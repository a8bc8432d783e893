package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"edgepipe/internal/app"
)

func init() {
	register("provider", "provider tools: 'provider contracts' prints each provider's declared retry contract per operation and model", providerCmd)
}

const providerHelp = `
Subcommands:
  contracts   print the declared contract (docs/design.md §6) of every provider, operation
              and model, with the models this configuration uses; ROUTED marks the
              provider each operation is sent to (EDGEPIPE_PROVIDER,
              EDGEPIPE_PROVIDER_IMAGE/_SPEECH/_VIDEO). Needs no credentials and
              calls nothing.`

func providerCmd(ctx context.Context, args []string) error {
	fs := newFlags("provider", "contracts [--why]", providerHelp)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		if len(args) == 0 {
			return fmt.Errorf("%w: a subcommand is required (contracts)", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "contracts":
		return providerContracts(os.Stdout, os.Getenv, args[1:])
	}
	return fmt.Errorf("%w: unknown subcommand %q (edgepipe provider --help lists them)", errUsage, args[0])
}

func providerContracts(w io.Writer, getenv func(string) string, args []string) error {
	fs := newFlags("provider contracts", "[--why]", `
Prints the declared retry contract of every (provider, operation, model).
sync: an ambiguous failure stops for a human; async_pollable: the external id
is persisted and polled, never resubmitted; idempotent_verified: retried with
the same key (proven by a test); fail_closed: never retried after a send.
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
