package render

import (
	"os"
	"sync"
	"time"
)

// maxMadeClips bounds the clips a Renderer remembers. A clip that was made
// but never joined (its job failed before the join) stays until it is
// pushed out; forgetting a clip costs only the probe Join would have done
// anyway.
const maxMadeClips = 4096

// madeClip is what a Renderer knows about a clip it wrote itself: the file
// as it was when ffmpeg finished (so a clip that changed since is not
// trusted), and what the clip command guarantees about its content.
type madeClip struct {
	file      os.FileInfo
	frames    int
	captioned bool
}

// madeClips remembers the clips one Renderer wrote, so that Join does not
// ask ffprobe what the clip command already decided: every clip a Renderer
// makes has its size, frame rate, codecs and encoder settings (hence the
// same H.264 parameter sets), and exactly its frame count in every stream.
// It is per Renderer (per geometry): a clip made at another size is unknown
// here, is probed, and is refused as a mismatch.
type madeClips struct {
	mu    sync.Mutex
	clips map[string]madeClip
}

func newMadeClips() *madeClips { return &madeClips{clips: map[string]madeClip{}} }

// add records the clip just renamed into path. A clip whose file cannot be
// read back is simply not recorded (Join will probe it).
func (m *madeClips) add(path string, frames int, captioned bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.clips[path]; !ok && len(m.clips) >= maxMadeClips {
		for k := range m.clips { // drop any one: it will be probed if joined
			delete(m.clips, k)
			break
		}
	}
	m.clips[path] = madeClip{file: fi, frames: frames, captioned: captioned}
}

// take returns what is known of every clip in paths and forgets them (a
// clip is joined once; a retry probes). ok is false, and nothing is
// forgotten, unless every clip is known and its file is the very one this
// Renderer wrote (same file, size and modification time).
func (m *madeClips) take(paths []string) (known []madeClip, ok bool) {
	known = make([]madeClip, len(paths))
	m.mu.Lock()
	for i, p := range paths {
		c, found := m.clips[p]
		if !found {
			m.mu.Unlock()
			return nil, false
		}
		known[i] = c
	}
	m.mu.Unlock()
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || !os.SameFile(fi, known[i].file) || fi.Size() != known[i].file.Size() ||
			!fi.ModTime().Equal(known[i].file.ModTime()) {
			return nil, false
		}
	}
	m.mu.Lock()
	for _, p := range paths {
		delete(m.clips, p)
	}
	m.mu.Unlock()
	return known, true
}

// clipDuration is how long a clip of frames frames lasts at fps, to the
// microsecond as ffprobe reports it.
func clipDuration(frames, fps int) time.Duration {
	return (time.Duration(frames) * time.Second / time.Duration(fps)).Round(time.Microsecond)
}
