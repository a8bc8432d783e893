package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
)

// keySchema changes when the meaning of any key input changes; old objects
// are then simply not found (and swept) instead of being reused wrongly.
const keySchema = "edgepipe-keys-v1"

// Object key prefixes edgepipe owns. The sweeper only looks under these.
const (
	PrefixUnits   = "units/"
	PrefixRenders = "renders/"
	// PrefixStaging holds paid provider answers until the asset made from
	// them exists or their job is final (StagingKey).
	PrefixStaging = "staging/"
)

// Prefixes lists every prefix edgepipe writes under.
var Prefixes = []string{PrefixUnits, PrefixRenders, PrefixStaging}

func hashParts(parts ...string) string {
	h := sha256.New()
	writeParts(h, parts...)
	return hex.EncodeToString(h.Sum(nil))
}

// writeParts length-prefixes each part, so ("ab","c") and ("a","bc") differ.
func writeParts(h hash.Hash, parts ...string) {
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write([]byte(p))
	}
}

// UnitKey identifies a scene's inputs: the same tenant, version, scene and
// output options give the same unit key.
func UnitKey(tenant, version string, s Scene, o Options) string {
	return hashParts(keySchema, "unit", tenant, version, s.Kind(), s.Prompt(), s.Narration,
		strconv.Itoa(s.DurationMS), o.Resolution, strconv.Itoa(o.FPS))
}

// ArtifactKey is the object key of one generated artifact. It hashes every
// frozen input that determines the provider's output (tenant, version,
// provider, model, operation, parameters, text), so equal inputs reuse one
// object and no user text ever appears in a key. The result is
// "units/<version>/<2 hex>/<64 hex>.<ext>": no path traversal is possible.
func ArtifactKey(tenant, version, provider, model, op, params, text, ext string) string {
	h := hashParts(keySchema, "artifact", tenant, version, provider, model, op, params, text)
	return PrefixUnits + safeVersion(version) + "/" + h[:2] + "/" + h + "." + ext
}

// StagingKey is where provider call callID's answer for (job, scene, op)
// is staged. The call id makes it unique to one paid answer, so no two
// writers ever race for it; the tenant and job are hashed (no raw user text
// in keys), and a later attempt on any machine derives the same key from
// the call row.
func StagingKey(tenant, jobID string, scene int, op string, callID int64) string {
	h := hashParts(keySchema, "staging", tenant, jobID)
	return fmt.Sprintf("%s%s/%s/%03d-%s-%d", PrefixStaging, h[:2], h[:40], scene, safeOp(op), callID)
}

// safeOp keeps an operation name to [a-z_] in keys (operations are
// constants; this only guarantees the key shape).
func safeOp(op string) string {
	out := make([]byte, 0, len(op))
	for i := 0; i < len(op) && i < 32; i++ {
		if c := op[i]; (c >= 'a' && c <= 'z') || c == '_' {
			out = append(out, c)
		}
	}
	return string(out)
}

// RenderKey is the object key of a final render: the frozen storyboard, the
// version, the renderer's output format and the keys of every scene's media
// (which name the provider and model that made them) decide it, so a render
// is reused only when it was made from exactly these scenes.
func RenderKey(tenant, version string, frozen []byte, rendererFingerprint string, artifactKeys []string) string {
	parts := append([]string{keySchema, "render", tenant, version, string(frozen), rendererFingerprint}, artifactKeys...)
	h := hashParts(parts...)
	return PrefixRenders + safeVersion(version) + "/" + h[:2] + "/" + h + ".mp4"
}

// safeVersion keeps a key's version segment to [a-z0-9]; versions are
// validated long before, this only guarantees the key shape.
func safeVersion(v string) string {
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v) && i < 16; i++ {
		c := v[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "x"
	}
	return string(out)
}
