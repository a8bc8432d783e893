package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeChecksConfigBeforeWritingTokens (issue 12 item 14): a
// configuration that Open or Build would refuse is refused before the
// development token files (or anything else) are written to the data
// directory.
func TestServeChecksConfigBeforeWritingTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kv   []string
		want string
	}{
		{"failpoints", []string{"EDGEPIPE_FAILPOINTS", "nonsense"}, "EDGEPIPE_FAILPOINTS"},
		{"binding without a workflow", []string{"EDGEPIPE_BINDINGS", "v1,v3"}, "EDGEPIPE_BINDINGS"},
		{"fake faults", []string{"EDGEPIPE_FAKE_FAULTS", "what=ever"}, "EDGEPIPE_FAKE_FAULTS"},
		{"provider timeout", []string{"EDGEPIPE_PROVIDER_URL", "http://127.0.0.1:1", "EDGEPIPE_PROVIDER_TIMEOUT", "soon"}, "EDGEPIPE_PROVIDER_TIMEOUT"},
		{"s3 without a bucket", []string{"EDGEPIPE_STORE", "s3"}, "EDGEPIPE_S3_BUCKET"},
		{"s3 part size", []string{"EDGEPIPE_STORE", "s3", "EDGEPIPE_S3_BUCKET", "media", "EDGEPIPE_S3_PART_SIZE_MIB", "1"}, "EDGEPIPE_S3_PART_SIZE_MIB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestCLI(t, "", append([]string{envURL, "", envToken, "", envFFprobe, "", "EDGEPIPE_ADDR", "127.0.0.1:0"}, tc.kv...)...)
			data := filepath.Join(c.dataDir, "data") // does not exist yet
			c.env["EDGEPIPE_DATA_DIR"] = data
			c.environ = append(c.environ, "EDGEPIPE_DATA_DIR="+data)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // should it start after all, it stops at once
			err := c.serve(ctx, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				ents, _ := os.ReadDir(data)
				t.Errorf("the data directory was written before the configuration was refused: %v", ents)
			}
			if strings.Contains(c.errOut.String(), "token") {
				t.Errorf("a token was printed: %s", c.errOut)
			}
		})
	}
}
