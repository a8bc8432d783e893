package api

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics holds the counters other packages increment: the engine (it
// implements pipeline.Metrics), the webhook dispatcher (webhook.Metrics) and
// the API itself. Gauges that the database knows better — jobs by status,
// open dead letters by reason, billed provider calls — are read from the
// store at scrape time instead. All methods are safe for concurrent use and
// do nothing on a nil *Metrics.
type Metrics struct {
	mu            sync.Mutex
	providerCalls map[[2]string]uint64 // op, status
	bytesUploaded map[string]uint64    // kind
	unitsReused   map[string]uint64    // kind
	retries       map[string]uint64    // error code
	webhooks      map[string]uint64    // outcome
	submissions   map[string]uint64    // created | replayed
	requests      map[[3]string]uint64 // method, route, status code
	stages        map[string]*histogram
}

// NewMetrics returns an empty set of counters.
func NewMetrics() *Metrics {
	return &Metrics{
		providerCalls: map[[2]string]uint64{},
		bytesUploaded: map[string]uint64{},
		unitsReused:   map[string]uint64{},
		retries:       map[string]uint64{},
		webhooks:      map[string]uint64{},
		submissions:   map[string]uint64{},
		requests:      map[[3]string]uint64{},
		stages:        map[string]*histogram{},
	}
}

// stageBuckets are the upper bounds, in seconds, of the stage duration
// histogram: from a cached prepare to a long render.
var stageBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

// ProviderCall counts a provider call by operation and outcome status
// (pipeline.Call*).
func (m *Metrics) ProviderCall(op, status string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.providerCalls[[2]string{op, status}]++
	m.mu.Unlock()
}

// BytesUploaded counts bytes written to the object store, by kind.
func (m *Metrics) BytesUploaded(kind string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.mu.Lock()
	m.bytesUploaded[kind] += uint64(n)
	m.mu.Unlock()
}

// StageDuration observes how long a stage took.
func (m *Metrics) StageDuration(stage string, d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	h := m.stages[stage]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(stageBuckets))}
		m.stages[stage] = h
	}
	sec := d.Seconds()
	if i, _ := slices.BinarySearch(stageBuckets, sec); i < len(stageBuckets) {
		h.counts[i]++
	}
	h.sum += sec
	h.n++
	m.mu.Unlock()
}

// UnitReused counts a scene result reused instead of generated again.
func (m *Metrics) UnitReused(kind string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.unitsReused[kind]++
	m.mu.Unlock()
}

// RetryScheduled counts an attempt that ended in retry_wait, by the safe
// error code that caused it.
func (m *Metrics) RetryScheduled(code string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.retries[code]++
	m.mu.Unlock()
}

// WebhookDelivery counts a webhook delivery attempt by outcome
// (webhook.Outcome*).
func (m *Metrics) WebhookDelivery(outcome string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.webhooks[outcome]++
	m.mu.Unlock()
}

func (m *Metrics) submission(result string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.submissions[result]++
	m.mu.Unlock()
}

func (m *Metrics) request(method, route string, code int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.requests[[3]string{method, route, strconv.Itoa(code)}]++
	m.mu.Unlock()
}

// WritePrometheus writes the counters in the Prometheus text exposition
// format (version 0.0.4).
func (m *Metrics) WritePrometheus(w io.Writer) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pw := newPromWriter(w)
	pw.family("edgepipe_provider_calls_total", "counter", "Provider calls made by this process, by operation and outcome.")
	for _, k := range sortedKeys(m.providerCalls, func(k [2]string) string { return k[0] + "\x00" + k[1] }) {
		pw.sample("edgepipe_provider_calls_total", labels("operation", k[0], "status", k[1]), float64(m.providerCalls[k]))
	}
	pw.counterVec("edgepipe_bytes_uploaded_total", "Bytes written to the object store by this process, by kind.", "kind", m.bytesUploaded)
	pw.counterVec("edgepipe_units_reused_total", "Scene results reused instead of generated again.", "kind", m.unitsReused)
	pw.counterVec("edgepipe_retries_total", "Attempts that ended in retry_wait, by error code.", "code", m.retries)
	pw.counterVec("edgepipe_webhook_deliveries_total", "Webhook delivery attempts, by outcome.", "outcome", m.webhooks)
	pw.counterVec("edgepipe_submissions_total", "Accepted job submissions: created or idempotent replays.", "result", m.submissions)
	pw.family("edgepipe_http_requests_total", "counter", "HTTP requests served, by method, route and status code.")
	for _, k := range sortedKeys(m.requests, func(k [3]string) string { return k[1] + "\x00" + k[0] + "\x00" + k[2] }) {
		pw.sample("edgepipe_http_requests_total", labels("method", k[0], "route", k[1], "code", k[2]), float64(m.requests[k]))
	}
	pw.family("edgepipe_stage_duration_seconds", "histogram", "Duration of workflow stages that finished.")
	for _, stage := range slices.Sorted(maps.Keys(m.stages)) {
		h := m.stages[stage]
		var cum uint64
		for i, le := range stageBuckets {
			cum += h.counts[i]
			pw.sample("edgepipe_stage_duration_seconds_bucket", labels("stage", stage, "le", formatFloat(le)), float64(cum))
		}
		pw.sample("edgepipe_stage_duration_seconds_bucket", labels("stage", stage, "le", "+Inf"), float64(h.n))
		pw.sample("edgepipe_stage_duration_seconds_sum", labels("stage", stage), h.sum)
		pw.sample("edgepipe_stage_duration_seconds_count", labels("stage", stage), float64(h.n))
	}
	return pw.flush()
}

func sortedKeys[K comparable, V any](m map[K]V, key func(K) string) []K {
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b K) int { return strings.Compare(key(a), key(b)) })
	return ks
}

// promWriter writes the text exposition format; the first write error
// sticks and is returned by flush.
type promWriter struct {
	w   *bufio.Writer
	err error
}

func newPromWriter(w io.Writer) *promWriter { return &promWriter{w: bufio.NewWriter(w)} }

func (p *promWriter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *promWriter) family(name, typ, help string) {
	p.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p *promWriter) sample(name, labels string, v float64) {
	p.printf("%s%s %s\n", name, labels, formatFloat(v))
}

func (p *promWriter) counterVec(name, help, label string, m map[string]uint64) {
	p.family(name, "counter", help)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p.sample(name, labels(label, k), float64(m[k]))
	}
}

// gaugeVec writes a gauge family; zero lists label values that are always
// present (so a dashboard sees 0, not a missing series).
func (p *promWriter) gaugeVec(name, help, label string, m map[string]int, zero []string) {
	p.family(name, "gauge", help)
	all := map[string]int{}
	for _, k := range zero {
		all[k] = 0
	}
	maps.Copy(all, m)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		p.sample(name, labels(label, k), float64(all[k]))
	}
}

func (p *promWriter) flush() error {
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// labels renders {k="v",…} with the format's escaping.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
