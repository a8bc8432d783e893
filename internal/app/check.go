package app

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"edgepipe/failpoint"
	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Check validates the settings FromEnv leaves to the parts that use them
// (routing, failpoints, bindings, provider or fake-provider settings, S3
// settings) without opening or starting anything, so a command can refuse
// a bad configuration before it changes anything on disk: serve writes its
// development tokens only after this passed. workers is how many workers
// the command will run (bindings and providers matter only to them).
// Open and Build still check the same things, and what only a live
// system can tell (ffmpeg present, S3 reachable, address free).
func (c Config) Check(workers int) error {
	if _, err := routing.NewRouter(c.Routing); err != nil {
		return err
	}
	if _, err := failpoint.Parse(c.Failpoints, nil); err != nil {
		return err
	}
	if workers > 0 {
		if err := checkBindings(c); err != nil {
			return err
		}
		// As providers() does: the provider settings count when a
		// provider URL is set, the fake's when it is not.
		if c.ProviderURL != "" {
			if _, err := c.ProviderSettings(); err != nil {
				return err
			}
		} else if _, err := c.FakeSettings(); err != nil {
			return err
		}
	}
	if c.Store == "s3" {
		sc, err := c.S3Settings(nil)
		if err != nil {
			return err
		}
		// As s3.New does: defaults first, then validation.
		if err := sc.WithDefaults().Validate(); err != nil {
			return err
		}
	}
	return nil
}

// knownVersions lists the workflow versions this build implements in
// version order.
func knownVersions() []string { return inVersionOrder(slices.Collect(maps.Keys(pipeline.Workflows))) }

// inVersionOrder sorts versions ("v<n>") by number: v2 before v10.
func inVersionOrder(vs []string) []string {
	slices.SortFunc(vs, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(a, b)) })
	return vs
}

// checkBindings refuses a binding this build has no workflow for.
func checkBindings(c Config) error {
	for _, v := range c.Routing.Bindings.Versions() {
		if _, ok := pipeline.Workflows[v]; !ok {
			return fmt.Errorf("EDGEPIPE_BINDINGS: this build has no implementation of %s (it has %s)", v,
				strings.Join(knownVersions(), ", "))
		}
	}
	return nil
}
