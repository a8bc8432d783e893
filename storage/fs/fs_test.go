package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/storagetest"
)

func newStore(t *testing.T) pipeline.ObjectStore {
	s, err := New(t.Context(), Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, newStore, storagetest.WithVerifier(func(t *testing.T, st pipeline.ObjectStore) storagetest.Verifier {
		return rawVerifier{root: st.(*Store).Root()}
	}))
}

// rawVerifier reads the store's directory directly, parsing the object
// files with its own code rather than the store's.
type rawVerifier struct{ root string }

func (v rawVerifier) file(key string) string {
	return filepath.Join(v.root, "objects", filepath.FromSlash(key)+"~obj")
}

func (v rawVerifier) Stat(_ context.Context, key string) (pipeline.ObjectInfo, error) {
	b, err := os.ReadFile(v.file(key))
	if errors.Is(err, iofs.ErrNotExist) {
		return pipeline.ObjectInfo{}, pipeline.ErrNotFound
	}
	if err != nil {
		return pipeline.ObjectInfo{}, err
	}
	if len(b) < 1024 {
		return pipeline.ObjectInfo{}, fmt.Errorf("%s: %d bytes, shorter than the header", key, len(b))
	}
	lines := bytes.SplitN(b[:1024], []byte("\n"), 3)
	if len(lines) != 3 || string(lines[0]) != "EDGEPIPE-OBJECT/1" {
		return pipeline.ObjectInfo{}, fmt.Errorf("%s: bad header %q", key, b[:64])
	}
	var meta struct {
		ContentType string `json:"content_type"`
		SHA256      string `json:"sha256"`
	}
	if err := json.Unmarshal(lines[1], &meta); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	return pipeline.ObjectInfo{Key: key, Size: int64(len(b) - 1024), ContentType: meta.ContentType, SHA256: meta.SHA256}, nil
}

func (v rawVerifier) Open(_ context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(v.file(key))
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(1024, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (v rawVerifier) PendingUploads(context.Context) (int, error) {
	entries, err := os.ReadDir(filepath.Join(v.root, "tmp"))
	return len(entries), err
}

func (v rawVerifier) StartUpload(_ context.Context, key string) error {
	// What a put that crashed mid-stream leaves: a temp file, no object.
	return os.WriteFile(filepath.Join(v.root, "tmp", "put-crashed-"+strings.ReplaceAll(key, "/", "_")), []byte("partial"), 0o600)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Config{})
	if !errors.Is(err, pipeline.ErrInvalidInput) || !strings.Contains(err.Error(), "EDGEPIPE_OBJECTS_DIR") {
		t.Errorf("New with no root: %v, want ErrInvalidInput naming the setting", err)
	}
}

// TestLayout pins the on-disk layout that operators (and rawVerifier) rely on.
func TestLayout(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := New(t.Context(), Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "renders/x.mp4", strings.NewReader("data"), pipeline.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "objects", "renders", "x.mp4~obj"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b[headerSize:]); got != "data" {
		t.Errorf("body = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "objects", "renders", "x.mp4~obj")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("object file mode = %v, %v; want 0644", fi.Mode(), err)
	}
	if err := s.Delete(t.Context(), "renders/x.mp4"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "objects", "renders")); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("empty directory left after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "objects")); err != nil {
		t.Errorf("objects root pruned: %v", err)
	}
}

func TestCorruptObject(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := New(t.Context(), Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "k", strings.NewReader("12345"), pipeline.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "objects", "k~obj")
	// A truncated body no longer matches the size in the header.
	if err := os.Truncate(path, headerSize+3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(t.Context(), "k"); !errors.Is(err, errCorrupt) {
		t.Errorf("Head of a truncated object: %v, want errCorrupt", err)
	}
	if err := os.WriteFile(path, []byte("not an object"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(t.Context(), "k", 0, -1); !errors.Is(err, errCorrupt) {
		t.Errorf("Get of a foreign file: %v, want errCorrupt", err)
	}
}

// TestStalledPutLosesToSweeper: a put whose temp file the sweeper removed
// fails rather than publishing nothing (or something) under the key.
func TestStalledPutLosesToSweeper(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := New(t.Context(), Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	src := &sweepingReader{data: []byte("partial"), sweep: func() {
		entries, _ := os.ReadDir(filepath.Join(root, "tmp"))
		for _, e := range entries {
			os.Remove(filepath.Join(root, "tmp", e.Name()))
		}
	}}
	if _, err := s.Put(t.Context(), "k", src, pipeline.PutOptions{CreateOnly: true}); err == nil {
		t.Fatal("Put succeeded although its temp file was removed")
	}
	if _, err := s.Head(t.Context(), "k"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("Head = %v, want ErrNotFound", err)
	}
}

type sweepingReader struct {
	data  []byte
	sweep func()
	done  bool
}

func (r *sweepingReader) Read(p []byte) (int, error) {
	if r.done {
		r.sweep()
		return 0, io.EOF
	}
	r.done = true
	return copy(p, r.data), nil
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, k := range storagetest.InvalidKeys {
		if err := pipeline.ValidateObjectKey(k); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("pipeline.ValidateObjectKey(%.40q) = %v, want ErrInvalidInput", k, err)
		}
	}
	for _, k := range storagetest.ValidKeys {
		if err := pipeline.ValidateObjectKey(k); err != nil {
			t.Errorf("pipeline.ValidateObjectKey(%.40q) = %v", k, err)
		}
	}
	for _, p := range []string{"", "a/", "a/b", "a/.", "a/..", ".", "renders/"} {
		if err := pipeline.ValidateObjectPrefix(p); err != nil {
			t.Errorf("pipeline.ValidateObjectPrefix(%q) = %v, want nil", p, err)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range append(storagetest.InvalidKeys, storagetest.ValidKeys...) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if pipeline.ValidateObjectKey(key) != nil {
			return
		}
		// A valid key never leaves the objects directory and maps back.
		p := filepath.Join("/root/objects", filepath.FromSlash(key)+objSuffix)
		rel, err := filepath.Rel("/root/objects", p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.ToSlash(rel) != key+objSuffix {
			t.Fatalf("key %q maps to %q", key, p)
		}
		if pipeline.ValidateObjectPrefix(key) != nil {
			t.Fatalf("valid key %q is not a valid prefix", key)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	good, err := header{ContentType: "video/mp4", SHA256: strings.Repeat("a", 64), Size: 7}.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("EDGEPIPE-OBJECT/1\n{}\n"))
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip.
		again, err := h.encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", h, err)
		}
		h2, err := decodeHeader(again)
		if err != nil || h2 != h {
			t.Fatalf("round trip %+v → %+v, %v", h, h2, err)
		}
	})
}

// mkdirs reports the parents of the directories it made also when a later
// mkdir fails: publish retries after a neighbour's Delete pruned a parent,
// and a directory made by the failed try must still have its entry synced.
func TestMkdirsReportsWhatItMadeWhenItFails(t *testing.T) {
	t.Parallel()
	st, err := New(t.Context(), Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(st.objects, "a")
	// A name longer than any filesystem takes fails the second mkdir.
	dir := filepath.Join(made, strings.Repeat("n", 300), "c")
	parents, err := st.mkdirs(dir)
	if err == nil {
		t.Fatal("mkdirs of a 300-byte name succeeded")
	}
	if fi, serr := os.Stat(made); serr != nil || !fi.IsDir() {
		t.Fatalf("the first directory was not made: %v", serr)
	}
	if len(parents) != 1 || parents[0] != st.objects {
		t.Fatalf("parents to sync %v, want [%s] (the parent of the directory made before the failure)", parents, st.objects)
	}
}
