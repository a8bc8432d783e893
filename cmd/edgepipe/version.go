package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	register("version", "print the version", func(ctx context.Context, args []string) error {
		fs := newFlags("version", "", "Prints edgepipe's version and Go version.")
		if err := fs.Parse(args); err != nil {
			return err
		}
		gov := "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			gov = bi.GoVersion
		}
		fmt.Printf("edgepipe %s (%s)\n", version, gov)
		return nil
	})
}
