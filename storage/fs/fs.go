// Package fs is the embedded object store: pipeline.ObjectStore on a local
// directory, so edgepipe runs with zero setup and no S3 endpoint.
//
// Each object is one file under Root/objects/, named after its key (a key
// "renders/ab.mp4" lives at objects/renders/ab.mp4~obj; the suffix, outside
// the key alphabet, lets "a" and "a/b" both exist). The file starts with a
// small header carrying the content type and SHA-256 (see header.go), so
// one link or rename publishes bytes and metadata together.
//
// A put streams into a temp file under Root/tmp/ (the same filesystem,
// checked at start-up) while hashing and counting, fsyncs it, and then
// publishes it: link(2) for a create-only put, which fails if the key is
// taken, or rename(2) for an overwrite; finally the directory is fsynced. A
// reader error, a canceled context or a crash leaves at most a temp file,
// which AbortStaleUploads removes.
package fs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"edgepipe/pipeline"
)

// objSuffix marks object files. '~' is not in the key alphabet, so no key
// segment (hence no directory) can end with it.
const objSuffix = "~obj"

// tmpPrefix names the temp files of puts in progress.
const tmpPrefix = "put-"

// Config configures a Store.
type Config struct {
	// Root is the store's directory; objects/ and tmp/ are made inside it.
	// Required.
	Root   string
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	if c.Root == "" {
		return fmt.Errorf("%w: fs: object store root is empty (EDGEPIPE_OBJECTS_DIR)", pipeline.ErrInvalidInput)
	}
	return nil
}

// Store is a pipeline.ObjectStore on a local directory. It is safe for
// concurrent use, also by several processes sharing Root.
type Store struct {
	root    string
	objects string
	tmp     string
	log     *slog.Logger
}

var _ pipeline.ObjectStore = (*Store)(nil)

// New opens the store at cfg.Root, creating its directories if needed.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("fs: %w", err)
	}
	s := &Store{
		root:    root,
		objects: filepath.Join(root, "objects"),
		tmp:     filepath.Join(root, "tmp"),
		log:     cfg.Logger,
	}
	for _, dir := range []string{s.objects, s.tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("fs: create %s: %w", dir, err)
		}
	}
	// link(2) and rename(2) only work within one filesystem; find out now
	// rather than on the first put.
	if a, b := device(s.objects), device(s.tmp); a != b {
		return nil, fmt.Errorf("%w: fs: %s and %s are on different filesystems", pipeline.ErrInvalidInput, s.objects, s.tmp)
	}
	s.log.Debug("fs object store opened", "root", root)
	return s, nil
}

func device(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}

// Root is the directory the store lives in.
func (s *Store) Root() string { return s.root }

// path maps a validated key to its object file.
func (s *Store) path(key string) string {
	return filepath.Join(s.objects, filepath.FromSlash(key)+objSuffix)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// ctxReader stops a copy once ctx ends, even if the source never blocks.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeError marks failures on our side of the copy, so they are not blamed
// on the reader.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

type hashingWriter struct {
	f *os.File
	h io.Writer
	n int64
}

func (w *hashingWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	_, _ = w.h.Write(p[:n]) // a hash: its Write never fails
	w.n += int64(n)
	if err != nil {
		return n, writeError{err}
	}
	return n, nil
}

// createTemp makes a temp file for a put.
func (s *Store) createTemp() (*os.File, error) {
	return os.CreateTemp(s.tmp, tmpPrefix+"*")
}

// Put streams r into key. See pipeline.ObjectStore.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if err := pipeline.ValidateObjectKey(key); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	ct, err := pipeline.ObjectContentType(opts.ContentType)
	if err != nil {
		return pipeline.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	if opts.CreateOnly {
		// Refuse before copying the stream; link(2) below is what makes
		// it safe against a racing writer.
		if _, err := os.Lstat(s.path(key)); err == nil {
			return pipeline.ObjectInfo{}, &pipeline.AlreadyExistsError{Key: key}
		}
	}
	f, err := s.createTemp()
	if err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()

	info, err := s.write(ctx, f, key, r, ct)
	if err != nil {
		return pipeline.ObjectInfo{}, err
	}
	if err := f.Close(); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: close: %w", key, err)
	}
	// Last chance to honour a cancel: after this the object is published.
	if err := ctx.Err(); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	if err := s.publish(tmp, key, opts.CreateOnly); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	committed = true
	return info, nil
}

// write fills the temp file: header placeholder, the stream (hashed and
// counted on the way), then the real header, then fsync.
func (s *Store) write(ctx context.Context, f *os.File, key string, r io.Reader, ct string) (pipeline.ObjectInfo, error) {
	if _, err := f.Seek(headerSize, io.SeekStart); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	h := sha256.New()
	w := &hashingWriter{f: f, h: h}
	bufp := copyBufs.Get().(*[]byte)
	_, err := io.CopyBuffer(w, ctxReader{ctx, r}, *bufp)
	copyBufs.Put(bufp)
	if err != nil {
		if we := (writeError{}); errors.As(err, &we) {
			return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: write: %w", key, we.err)
		}
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: read source: %w", key, err)
	}
	hd := header{ContentType: ct, SHA256: hex.EncodeToString(h.Sum(nil)), Size: w.n}
	hb, err := hd.encode()
	if err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	if _, err := f.WriteAt(hb, 0); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: write header: %w", key, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: fsync: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	return pipeline.ObjectInfo{
		Key: key, Size: w.n, ContentType: ct, SHA256: hd.SHA256, LastModified: fi.ModTime(),
	}, nil
}

// publishTries bounds how often a put makes its directories again after a
// concurrent Delete pruned them: each retry means another writer emptied
// and removed a parent in the few microseconds between two system calls.
const publishTries = 20

// publish moves a finished temp file to key's path: link(2) when the key
// must not exist yet (it fails atomically if it does), rename(2) otherwise.
func (s *Store) publish(tmp, key string, createOnly bool) error {
	target := s.path(key)
	dir := filepath.Dir(target)
	// A concurrent Delete prunes the directories it empties, so a parent may
	// vanish while we make the ones below it (mkdir fails with ENOENT) or
	// between our mkdir and our link (the link does): then we make them
	// again. The parents of every directory made on the way are synced once
	// the object is in place: all of them are its ancestors, so they exist.
	var (
		err     error
		created []string
	)
	for range publishTries {
		var made []string
		made, err = s.mkdirs(dir)
		created = append(created, made...)
		if errors.Is(err, iofs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fs: put %s: %w", key, err)
		}
		if createOnly {
			err = os.Link(tmp, target)
			if err == nil {
				_ = os.Remove(tmp)
			}
		} else {
			err = os.Rename(tmp, target)
		}
		if err == nil {
			return s.syncDirs(append(slices.Compact(slices.Sorted(slices.Values(created))), dir))
		}
		if errors.Is(err, iofs.ErrExist) && createOnly {
			return &pipeline.AlreadyExistsError{Key: key}
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			break
		}
		if _, serr := os.Stat(tmp); serr != nil {
			// Our temp file is gone: AbortStaleUploads took it.
			return fmt.Errorf("fs: put %s: temp file removed while writing (by AbortStaleUploads?): %w", key, err)
		}
	}
	return fmt.Errorf("fs: put %s: %w", key, err)
}

// mkdirs makes dir and its missing parents below the objects directory,
// returning the parents of the ones it made (whose entries must be synced),
// also when it fails partway.
func (s *Store) mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; d != s.objects; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	var parents []string
	for _, d := range slices.Backward(missing) {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, iofs.ErrExist) {
			// What was made stays made: a put that tries again (a
			// neighbour's Delete pruned d's parent) must still sync it.
			return parents, err
		}
		parents = append(parents, filepath.Dir(d))
	}
	return parents, nil
}

// syncDirs fsyncs directories so new entries survive a power loss.
func (s *Store) syncDirs(dirs []string) error {
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("fs: sync dir: %w", err)
		}
		err = f.Sync()
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("fs: sync dir %s: %w", d, err)
		}
	}
	return nil
}

// open opens key's file and reads its header.
func (s *Store) open(key string) (*os.File, pipeline.ObjectInfo, error) {
	f, err := os.Open(s.path(key))
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w", key, pipeline.ErrNotFound)
		}
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w", key, err)
	}
	info, err := readInfo(f, key)
	if err != nil {
		_ = f.Close()
		return nil, pipeline.ObjectInfo{}, err
	}
	return f, info, nil
}

func readInfo(f *os.File, key string) (pipeline.ObjectInfo, error) {
	buf := make([]byte, headerSize)
	if _, err := io.ReadFull(f, buf); err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w: %v", key, errCorrupt, err)
	}
	h, err := decodeHeader(buf)
	if err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w", key, err)
	}
	if fi.Size()-headerSize != h.Size {
		return pipeline.ObjectInfo{}, fmt.Errorf("fs: %s: %w: header says %d bytes, file holds %d", key, errCorrupt, h.Size, fi.Size()-headerSize)
	}
	return pipeline.ObjectInfo{
		Key: key, Size: h.Size, ContentType: h.ContentType, SHA256: h.SHA256, LastModified: fi.ModTime(),
	}, nil
}

// Head returns key's metadata.
func (s *Store) Head(ctx context.Context, key string) (pipeline.ObjectInfo, error) {
	if err := pipeline.ValidateObjectKey(key); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return pipeline.ObjectInfo{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return pipeline.ObjectInfo{}, err
	}
	_ = f.Close()
	return info, nil
}

type sectionReadCloser struct {
	*io.SectionReader
	f *os.File
}

func (r sectionReadCloser) Close() error { return r.f.Close() }

// Get opens key, or [offset, offset+length) of it. The returned info
// describes the whole object. An offset past the end is ErrInvalidInput; a
// range running past the end is cut short.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, pipeline.ObjectInfo, error) {
	if err := pipeline.ValidateObjectKey(key); err != nil {
		return nil, pipeline.ObjectInfo{}, err
	}
	if offset < 0 {
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("%w: fs: negative offset %d", pipeline.ErrInvalidInput, offset)
	}
	if err := ctx.Err(); err != nil {
		return nil, pipeline.ObjectInfo{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, pipeline.ObjectInfo{}, err
	}
	if offset > info.Size {
		_ = f.Close()
		return nil, pipeline.ObjectInfo{}, fmt.Errorf("%w: fs: %s: offset %d is past the end (%d bytes)", pipeline.ErrInvalidInput, key, offset, info.Size)
	}
	n := info.Size - offset
	if length >= 0 && length < n {
		n = length
	}
	return sectionReadCloser{io.NewSectionReader(f, headerSize+offset, n), f}, info, nil
}

// Delete removes key and then any directories it leaves empty.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := pipeline.ValidateObjectKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	target := s.path(key)
	if err := os.Remove(target); err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("fs: delete %s: %w", key, err)
	}
	dir := filepath.Dir(target)
	if err := s.syncDirs([]string{dir}); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("fs: delete %s: %w", key, err)
	}
	// Prune empty parents; a put racing into one retries its mkdir.
	for d := dir; d != s.objects && strings.HasPrefix(d, s.objects); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

// errStop ends a List walk early.
var errStop = errors.New("stop")

// List calls fn for every object whose key starts with prefix, in byte
// order of the keys.
func (s *Store) List(ctx context.Context, prefix string, fn func(pipeline.ObjectInfo) bool) error {
	if err := pipeline.ValidateObjectPrefix(prefix); err != nil {
		return err
	}
	// "renders/ab" → walk objects/renders/, keeping names starting with "ab".
	dirPart, namePrefix := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirPart, namePrefix = prefix[:i+1], prefix[i+1:]
	}
	err := s.walk(ctx, filepath.Join(s.objects, filepath.FromSlash(dirPart)), dirPart, namePrefix, fn)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// walk visits dir depth first. Within a directory, entries are ordered by
// what they contribute to a key: a file "b~obj" contributes "b", a
// directory "b" contributes "b/". Every key below an entry starts with its
// contribution, and no contribution is a prefix of a sibling's except a
// file's of its same-named directory's (whose keys are all greater), so
// this order is exactly the byte order of the full keys.
func (s *Store) walk(ctx context.Context, dir, keyPrefix, namePrefix string, fn func(pipeline.ObjectInfo) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("fs: list: %w", err)
	}
	type item struct {
		part string
		dir  bool
	}
	items := make([]item, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		var it item
		switch {
		case e.IsDir():
			it = item{part: name + "/", dir: true}
		case e.Type().IsRegular() && strings.HasSuffix(name, objSuffix):
			it = item{part: strings.TrimSuffix(name, objSuffix)}
		default:
			continue
		}
		if strings.HasPrefix(it.part, namePrefix) {
			items = append(items, it)
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.part, b.part) })
	for _, it := range items {
		if it.dir {
			sub := filepath.Join(dir, strings.TrimSuffix(it.part, "/"))
			if err := s.walk(ctx, sub, keyPrefix+it.part, "", fn); err != nil {
				return err
			}
			continue
		}
		key := keyPrefix + it.part
		f, err := os.Open(filepath.Join(dir, it.part+objSuffix))
		if errors.Is(err, iofs.ErrNotExist) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return fmt.Errorf("fs: list: %w", err)
		}
		info, err := readInfo(f, key)
		_ = f.Close()
		if err != nil {
			return err
		}
		if !fn(info) {
			return errStop
		}
	}
	return nil
}

// AbortStaleUploads removes temp files of puts that were last written
// before olderThan. A live put keeps touching its temp file, so only
// abandoned ones (crashed writers, or writers stalled past the cutoff)
// are removed; such a stalled put then fails instead of publishing.
func (s *Store) AbortStaleUploads(ctx context.Context, olderThan time.Time) (int, error) {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return 0, fmt.Errorf("fs: abort stale uploads: %w", err)
	}
	n := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(olderThan) {
			continue
		}
		if err := os.Remove(filepath.Join(s.tmp, e.Name())); err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				continue
			}
			return n, fmt.Errorf("fs: abort stale uploads: %w", err)
		}
		s.log.Info("removed stale upload", "file", e.Name(), "modified", fi.ModTime())
		n++
	}
	return n, nil
}

// Ping checks that the store's directories are there.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, d := range []string{s.objects, s.tmp} {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("fs: ping: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("fs: ping: %s is not a directory", d)
		}
	}
	return nil
}
