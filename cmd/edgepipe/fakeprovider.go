package main

import (
	"context"
	"strconv"
	"time"

	"edgepipe/provider/fake"
)

func init() {
	register("fake-provider", "run the fake image/speech/video providers standalone, with fault injection and a billing ledger", fakeProvider)
}

func fakeProvider(ctx context.Context, args []string) error {
	fs := newFlags("fake-provider", "[--addr 127.0.0.1:9090] [--faults SPEC] [--seed N]", `
Serves the provider API edgepipe's adapters speak (POST /v1/images, /v1/speech,
/v1/videos, GET /v1/videos/{id}[/content]) plus GET /ledger, the count of
billed calls per operation, unit and idempotency key.

Faults (also EDGEPIPE_FAKE_FAULTS for the in-process fake):
`+fake.FaultsHelp)
	addr := fs.String("addr", "127.0.0.1:9090", "listen address")
	faults := fs.String("faults", "", "fault injection SPEC (see above); empty keeps "+fake.EnvFaults)
	seed := fs.Uint64("seed", 0, "seed of the fault generator (0 = random, logged)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	settings, log, err := loadConfig()
	if err != nil {
		return err
	}
	cfg, err := settings.FakeSettings()
	if err != nil {
		return err
	}
	if *faults != "" {
		if cfg.Faults, err = fake.ParseFaults(*faults); err != nil {
			return err
		}
	}
	if *seed != 0 {
		cfg.Seed = *seed
	}
	cfg.Logger = log
	srv, err := fake.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("fake providers listening", "addr", *addr, "seed", strconv.FormatUint(srv.Seed(), 10))
	return srv.Run(ctx, *addr, 10*time.Second)
}
