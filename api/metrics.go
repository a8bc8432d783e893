package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// Metrics holds what other packages observe in this process: the engine and
// worker (it implements pipeline.Metrics), the webhook dispatcher
// (webhook.Metrics) and the API itself. Each Metrics has its own Prometheus
// registry — never the global default one — holding these series and the Go
// runtime and process collectors, so two servers (or two parallel tests)
// never share or collide on a series. Gauges that the database knows better
// — jobs by status, open dead letters by reason, billed provider calls,
// queue backlogs — are read from the store at scrape time by a Collector the
// Server adds (storeCollector). All methods are safe for concurrent use and
// do nothing on a nil *Metrics.
type Metrics struct {
	reg *prometheus.Registry

	providerCalls   *prometheus.CounterVec   // operation, status
	providerLatency *prometheus.HistogramVec // provider, operation
	bytesUploaded   *prometheus.CounterVec   // kind
	unitsReused     *prometheus.CounterVec   // kind
	retries         *prometheus.CounterVec   // code
	webhooks        *prometheus.CounterVec   // outcome
	submissions     *prometheus.CounterVec   // result
	requests        *prometheus.CounterVec   // method, route, code
	stages          *prometheus.HistogramVec // stage
	jobLatency      *prometheus.HistogramVec // version, status
	jobAttempts     *prometheus.HistogramVec // status
}

// Histogram buckets, in seconds unless said otherwise.
var (
	// stageBuckets: from a cached prepare to a long render.
	stageBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	// providerBuckets: from a cached answer to an async video submission
	// behind a slow gateway.
	providerBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}
	// jobBuckets: submission to settlement, including queueing, retry
	// backoff and infrastructure waits (hours).
	jobBuckets = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600}
	// attemptBuckets count attempts; the default retry policy allows a
	// handful, infrastructure waits a few more.
	attemptBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}
)

// NewMetrics returns an empty set of series on a private registry, with the
// Go runtime and process collectors.
func NewMetrics() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		reg:             prometheus.NewRegistry(),
		providerCalls:   counter("edgepipe_provider_calls_total", "Provider calls made by this process, by operation and outcome.", "operation", "status"),
		providerLatency: histogram("edgepipe_provider_call_duration_seconds", "Duration of provider requests made by this process, sent to answered or failed, by provider and operation.", providerBuckets, "provider", "operation"),
		bytesUploaded:   counter("edgepipe_bytes_uploaded_total", "Bytes written to the object store by this process, by kind.", "kind"),
		unitsReused:     counter("edgepipe_units_reused_total", "Scene results reused instead of generated again.", "kind"),
		retries:         counter("edgepipe_retries_total", "Attempts that ended in retry_wait, by error code.", "code"),
		webhooks:        counter("edgepipe_webhook_deliveries_total", "Webhook delivery attempts, by outcome.", "outcome"),
		submissions:     counter("edgepipe_submissions_total", "Accepted job submissions: created or idempotent replays.", "result"),
		requests:        counter("edgepipe_http_requests_total", "HTTP requests served, by method, route and status code.", "method", "route", "code"),
		stages:          histogram("edgepipe_stage_duration_seconds", "Duration of workflow stages that finished.", stageBuckets, "stage"),
		jobLatency:      histogram("edgepipe_job_duration_seconds", "Time from submission to settlement of jobs whose attempt in this process settled them, by workflow version and settled status.", jobBuckets, "version", "status"),
		jobAttempts:     histogram("edgepipe_job_attempts", "Attempts a job took until an attempt in this process settled it, by settled status.", attemptBuckets, "status"),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.providerCalls, m.providerLatency, m.bytesUploaded, m.unitsReused, m.retries,
		m.webhooks, m.submissions, m.requests, m.stages, m.jobLatency, m.jobAttempts,
	)
	return m
}

// ProviderCall counts a provider call by operation and outcome status
// (pipeline.Call*).
func (m *Metrics) ProviderCall(op, status string) {
	if m == nil {
		return
	}
	add(m.providerCalls, 1, op, status)
}

// ProviderLatency observes how long a provider request took.
func (m *Metrics) ProviderLatency(provider, op string, d time.Duration) {
	if m == nil {
		return
	}
	observe(m.providerLatency, d.Seconds(), provider, op)
}

// BytesUploaded counts bytes written to the object store, by kind.
func (m *Metrics) BytesUploaded(kind string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	add(m.bytesUploaded, float64(n), kind)
}

// StageDuration observes how long a stage took.
func (m *Metrics) StageDuration(stage string, d time.Duration) {
	if m == nil {
		return
	}
	observe(m.stages, d.Seconds(), stage)
}

// UnitReused counts a scene result reused instead of generated again.
func (m *Metrics) UnitReused(kind string) {
	if m == nil {
		return
	}
	add(m.unitsReused, 1, kind)
}

// RetryScheduled counts an attempt that ended in retry_wait, by the safe
// error code that caused it.
func (m *Metrics) RetryScheduled(code string) {
	if m == nil {
		return
	}
	add(m.retries, 1, code)
}

// JobSettled observes a job settled by an attempt of this process: its
// submission-to-settlement time and how many attempts it took.
func (m *Metrics) JobSettled(version string, status pipeline.Status, sinceSubmitted time.Duration, attempts int) {
	if m == nil {
		return
	}
	observe(m.jobLatency, max(sinceSubmitted, 0).Seconds(), version, string(status))
	observe(m.jobAttempts, float64(attempts), string(status))
}

// WebhookDelivery counts a webhook delivery attempt by outcome
// (webhook.Outcome*).
func (m *Metrics) WebhookDelivery(outcome string) {
	if m == nil {
		return
	}
	add(m.webhooks, 1, outcome)
}

func (m *Metrics) submission(result string) {
	if m == nil {
		return
	}
	add(m.submissions, 1, result)
}

func (m *Metrics) request(method, route string, code int) {
	if m == nil {
		return
	}
	add(m.requests, 1, methodLabel(method), route, strconv.Itoa(code))
}

// methodLabel keeps the method label's values few: any client can send a
// request with a method of its own invention, and each would otherwise
// become a new series.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// add and observe never panic on a label value: client_golang refuses
// invalid UTF-8, which an adapter's status or a code could carry.
func add(v *prometheus.CounterVec, n float64, labels ...string) {
	if c, err := v.GetMetricWithLabelValues(validLabels(labels)...); err == nil {
		c.Add(n)
	}
}

func observe(v *prometheus.HistogramVec, x float64, labels ...string) {
	if o, err := v.GetMetricWithLabelValues(validLabels(labels)...); err == nil {
		o.Observe(x)
	}
}

func validLabels(labels []string) []string {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	return labels
}

// QueueStats is implemented by stores that can report queue backlogs
// (storage/sqlite). fn is called once per queue holding messages: how many
// it holds, how many are ready (visible now) and how long the oldest ready
// one has waited for a worker (0 when none is ready).
type QueueStats interface {
	QueueStats(ctx context.Context, fn func(queue string, messages, ready int, oldestReadyAge time.Duration)) error
}

// Known label values reported at 0 when the database has none, so a
// dashboard sees 0 rather than a missing series.
var (
	deadLetterReasons = []string{pipeline.ReasonUnboundVersion, pipeline.ReasonPoison, pipeline.ReasonRetriesExhausted, pipeline.ReasonInfraUnavailable}
	billedOperations  = []string{pipeline.OpImage, pipeline.OpSpeech, pipeline.OpVideoSubmit}
)

var (
	descJobs = prometheus.NewDesc("edgepipe_jobs",
		"Jobs by status, from the database.", []string{"status"}, nil)
	descDeadLetters = prometheus.NewDesc("edgepipe_dead_letters_open",
		"Dead letters not yet redriven, by reason, from the database.", []string{"reason"}, nil)
	descBilled = prometheus.NewDesc("edgepipe_provider_calls_billed",
		"Provider calls that may have been billed (the audit trail), by operation, from the database.", []string{"operation"}, nil)
	descQueueDepth = prometheus.NewDesc("edgepipe_queue_depth",
		"Messages on a queue (ready, leased or backing off), from the database.", []string{"queue"}, nil)
	descQueueReady = prometheus.NewDesc("edgepipe_queue_ready",
		"Messages on a queue that a worker may claim now, from the database.", []string{"queue"}, nil)
	descQueueOldest = prometheus.NewDesc("edgepipe_queue_oldest_ready_age_seconds",
		"How long the oldest ready message of a queue has waited for a worker (0 when none is ready), from the database.", []string{"queue"}, nil)
)

// storeCollector reads the store's gauges when it is collected. One is
// built per scrape, with the request's context, so a scrape whose client
// went away stops its queries; the first failure is kept in err for the
// handler to answer as a problem (the collector interface has no error).
type storeCollector struct {
	ctx    context.Context
	store  Store
	queues []string // bound queues, reported at 0 when empty
	err    error
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descDeadLetters, descBilled, descQueueDepth, descQueueReady, descQueueOldest} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	fail := func(d *prometheus.Desc, err error) {
		if c.err == nil {
			c.err = err
		}
		ch <- prometheus.NewInvalidMetric(d, err)
	}
	gauges := func(d *prometheus.Desc, values map[string]int, zero []string) {
		for _, k := range zero {
			if _, ok := values[k]; !ok {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 0, k)
			}
		}
		for k, n := range values {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), strings.ToValidUTF8(k, "\uFFFD"))
		}
	}

	byStatus, err := c.store.CountByStatus(c.ctx)
	if err != nil {
		fail(descJobs, err)
		return
	}
	statuses := make(map[string]int, len(byStatus))
	for st, n := range byStatus {
		statuses[string(st)] = n
	}
	all := make([]string, len(pipeline.AllStatuses))
	for i, st := range pipeline.AllStatuses {
		all[i] = string(st)
	}
	gauges(descJobs, statuses, all)

	dls, err := c.store.CountDeadLetters(c.ctx)
	if err != nil {
		fail(descDeadLetters, err)
		return
	}
	gauges(descDeadLetters, dls, deadLetterReasons)

	billed, err := c.store.CountBilledCalls(c.ctx)
	if err != nil {
		fail(descBilled, err)
		return
	}
	gauges(descBilled, billed, billedOperations)

	qs, ok := c.store.(QueueStats)
	if !ok {
		return
	}
	seen := map[string]bool{}
	err = qs.QueueStats(c.ctx, func(queue string, messages, ready int, oldest time.Duration) {
		seen[queue] = true
		queue = strings.ToValidUTF8(queue, "\uFFFD")
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(messages), queue)
		ch <- prometheus.MustNewConstMetric(descQueueReady, prometheus.GaugeValue, float64(ready), queue)
		ch <- prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, oldest.Seconds(), queue)
	})
	if err != nil {
		fail(descQueueDepth, err)
		return
	}
	for _, q := range c.queues {
		if !seen[q] {
			for _, d := range []*prometheus.Desc{descQueueDepth, descQueueReady, descQueueOldest} {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 0, q)
			}
		}
	}
}

// metrics is GET /metrics, served by promhttp (text, OpenMetrics or
// protobuf as the scraper asks, compressed if it accepts it): this
// process's series from its Metrics registry, and the store's gauges read
// now. Everything is gathered before the first byte is written, so a store
// failure is answered as a problem (503 when the database is unavailable)
// like on every other route, not as half an exposition.
func (s *Server) metrics(c echo.Context) error {
	sc := &storeCollector{ctx: c.Request().Context(), store: s.cfg.Store, queues: s.boundQueues()}
	scrape := prometheus.NewRegistry()
	if err := scrape.Register(sc); err != nil {
		return err
	}
	mfs, err := prometheus.Gatherers{s.cfg.Metrics.reg, scrape}.Gather()
	if sc.err != nil {
		return sc.err
	}
	if err != nil {
		return err
	}
	promhttp.HandlerFor(gathered(mfs), promhttp.HandlerOpts{
		ErrorLog:          slogPromLogger{s.log},
		ErrorHandling:     promhttp.HTTPErrorOnError,
		EnableOpenMetrics: true,
	}).ServeHTTP(c.Response(), c.Request())
	return nil
}

// boundQueues are the queues of the versions this deployment binds.
func (s *Server) boundQueues() []string {
	vs := s.cfg.Router.Config().Bindings.Versions()
	qs := make([]string, len(vs))
	for i, v := range vs {
		qs[i] = routing.QueueName(v)
	}
	return qs
}

// gathered hands promhttp families already gathered.
type gathered []*dto.MetricFamily

func (g gathered) Gather() ([]*dto.MetricFamily, error) { return g, nil }

// slogPromLogger lets promhttp report encoding errors to the server's log.
type slogPromLogger struct {
	log interface{ Error(string, ...any) }
}

func (l slogPromLogger) Println(v ...any) {
	l.log.Error("serving metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
