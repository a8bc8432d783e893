package fs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"edgepipe/pipeline"
)

// Every object file starts with a fixed-size header holding its metadata,
// followed by the object's bytes. Keeping the metadata inside the same file
// (rather than in a sidecar) is what makes a put atomic: the single link or
// rename that publishes the bytes publishes their content type and SHA-256
// with them, so no reader and no crash can ever see one without the other.
//
// Layout: the magic line, one line of JSON, then zero padding up to
// headerSize.
const headerSize = 1024

var magic = []byte("EDGEPIPE-OBJECT/1\n")

type header struct {
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
}

var errCorrupt = errors.New("corrupt object header")

func (h header) encode() ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, headerSize)
	n := copy(buf, magic)
	if n+len(js)+1 > headerSize {
		// Cannot happen with a validated content type (<= 255 bytes).
		return nil, fmt.Errorf("object header needs %d bytes, more than %d", n+len(js)+1, headerSize)
	}
	n += copy(buf[n:], js)
	buf[n] = '\n'
	return buf, nil
}

// decodeHeader parses the first headerSize bytes of an object file. The
// file may have been damaged or written by something else; anything but a
// well-formed header is errCorrupt.
func decodeHeader(b []byte) (header, error) {
	var h header
	if len(b) < headerSize || !bytes.HasPrefix(b, magic) {
		return h, errCorrupt
	}
	rest := b[len(magic):headerSize]
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		return h, errCorrupt
	}
	if err := json.Unmarshal(rest[:end], &h); err != nil {
		return h, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if h.Size < 0 || len(h.SHA256) != 64 {
		return h, errCorrupt
	}
	if _, err := pipeline.ObjectContentType(h.ContentType); err != nil || h.ContentType == "" {
		return h, errCorrupt
	}
	return h, nil
}
