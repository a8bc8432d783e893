package pipeline_test

import (
	"testing"

	"edgepipe/pipeline"
)

// TestCRC64NVME: the catalogue's check value of CRC-64/NVME (the CRC of
// "123456789" is 0xae8b14860a799888), spelled as ObjectInfo.CRC64NVME is.
func TestCRC64NVME(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"123456789", "ae8b14860a799888"},
		{"", "0000000000000000"},
	} {
		if got := pipeline.CRC64NVME([]byte(c.in)); got != c.want {
			t.Errorf("CRC64NVME(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
