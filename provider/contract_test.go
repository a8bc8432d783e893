package provider_test

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"net/http/httptrace"
	"sync/atomic"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

func TestContractTable(t *testing.T) {
	t.Parallel()
	p := newClient(t, "http://127.0.0.1:1")
	want := map[string]pipeline.Contract{
		pipeline.OpImage:       pipeline.ContractIdempotentVerified,
		pipeline.OpSpeech:      pipeline.ContractSync,
		pipeline.OpVideoSubmit: pipeline.ContractAsyncPollable,
		provider.OpVideoStatus: pipeline.ContractFailClosed,
		provider.OpVideoFetch:  pipeline.ContractFailClosed,
		provider.OpOther:       pipeline.ContractFailClosed,
		"":                     pipeline.ContractFailClosed,
		"IMAGE":                pipeline.ContractFailClosed,
		"music":                pipeline.ContractFailClosed,
	}
	for op, c := range want {
		if got := p.Contract(op); got != c {
			t.Errorf("Contract(%q) = %q, want %q", op, got, c)
		}
	}
	table := provider.ContractTable()
	if len(table) != 4 || table[len(table)-1].Op != provider.OpOther {
		t.Fatalf("table = %+v, want the three operations and the %q row last", table, provider.OpOther)
	}
	for _, row := range table {
		if row.Why == "" {
			t.Errorf("row %q has no reason", row.Op)
		}
		if row.Op != provider.OpOther && p.Contract(row.Op) != row.Contract {
			t.Errorf("Contract(%q) = %q disagrees with the table's %q", row.Op, p.Contract(row.Op), row.Contract)
		}
	}
	table[0].Contract = pipeline.ContractSync
	if provider.ContractTable()[0].Contract != pipeline.ContractIdempotentVerified {
		t.Fatal("ContractTable returned the table itself, not a copy")
	}
}

// TestImageContractIdempotentVerifiedIsProven is the proof the image row of
// the contract table stands on (docs/design.md §6: "tested, not read in docs"):
// against the real provider server, the same idempotency key sent twice is
// billed once and returns the same bytes, and a retry after a call that
// failed *after* being billed does not pay again.
func TestImageContractIdempotentVerifiedIsProven(t *testing.T) {
	t.Parallel()
	srv, base := startFake(t, fake.Config{})
	p := newClient(t, base)
	if c := p.Contract(pipeline.OpImage); c != pipeline.ContractIdempotentVerified {
		t.Fatalf("image contract is %q; this test proves idempotent_verified", c)
	}
	ctx := context.Background()
	meta := metaFor("job1/scene1", "job1/scene1/image/v1")

	first, err := p.GenerateImage(ctx, meta, sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	a := readMedia(t, first)
	second, err := p.GenerateImage(ctx, meta, sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	b := readMedia(t, second)
	if !bytes.Equal(a, b) {
		t.Fatal("the same key returned different bytes")
	}
	img, err := png.Decode(bytes.NewReader(a))
	if err != nil || img.Bounds().Dx() != sampleImage.Width || img.Bounds().Dy() != sampleImage.Height {
		t.Fatalf("not a %dx%d PNG: %v", sampleImage.Width, sampleImage.Height, err)
	}
	l := srv.Ledger()
	if l.Billed.Image != 1 || l.Replayed != 1 || l.ByIdempotencyKey[meta.IdempotencyKey] != 1 || l.ByUnit[meta.UnitID].Image != 1 {
		t.Fatalf("two calls with one key: ledger %+v, want billed once and replayed once", l)
	}

	// Control: the ledger does count, so a second key is a second bill.
	other, err := p.GenerateImage(ctx, metaFor("job1/scene2", "job1/scene2/image/v1"), sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	readMedia(t, other)
	if got := srv.Ledger().Billed.Image; got != 2 {
		t.Fatalf("a different key billed %d images in total, want 2", got)
	}

	// The case the contract exists for: the call is billed, the answer is
	// lost (500 after commit, outcome unknown), the pipeline retries with
	// the same key. The retry must not pay again.
	srv.ResetLedger()
	retryMeta := metaFor("job1/scene3", "job1/scene3/image/v1")
	setFaults(t, srv, "image:after_commit=1")
	_, err = p.GenerateImage(ctx, retryMeta, sampleImage)
	wantCallError(t, err, pipeline.OpImage, pipeline.OutcomeUnknown, provider.CodeServerError, 500)
	setFaults(t, srv, "")
	m, err := p.GenerateImage(ctx, retryMeta, sampleImage)
	if err != nil {
		t.Fatalf("retry with the same key: %v", err)
	}
	readMedia(t, m)
	if l := srv.Ledger(); l.Billed.Image != 1 || l.Replayed != 1 {
		t.Fatalf("failed-after-billing call plus retry: ledger %+v, want billed once, replayed once", l)
	}
}

// TestImageTransportResendIsDeduplicated shows why only the image request
// may be resent by net/http: on a reused connection that drops after the
// call was billed, the transport does resend it (two requests reach the
// server), and the key makes the resend free.
func TestImageTransportResendIsDeduplicated(t *testing.T) {
	t.Parallel()
	srv, base := startFake(t, fake.Config{})
	p := newClient(t, base, withKeepAliveClient(t))
	ctx := context.Background()
	warm, err := p.GenerateImage(ctx, metaFor("u/warm", "warm"), sampleImage)
	if err != nil {
		t.Fatal(err)
	}
	readMedia(t, warm)
	srv.ResetLedger()
	setFaults(t, srv, "image:drop=1")

	var reused atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Store(true)
		}
	}})
	_, err = p.GenerateImage(ctx, metaFor("u/1", "k-1"), sampleImage)
	wantCallError(t, err, pipeline.OpImage, pipeline.OutcomeUnknown, provider.CodeConnectionLost, 0)
	if !reused.Load() {
		t.Fatal("the call did not reuse the warm connection; the resend path was not exercised")
	}
	if l := srv.Ledger(); l.Calls != 2 || l.Billed.Image != 1 || l.Replayed != 1 {
		t.Fatalf("ledger %+v, want 2 requests (the transport's resend), 1 billed, 1 replayed", l)
	}
}

// TestSpeechDropIsBilledOnceAndUnknown: the double-billed voice incident.
// The provider bills the speech call, then drops the connection. One client
// call must reach the server exactly once (no hidden resend by net/http,
// even on a reused keep-alive connection with a key in meta) and the error
// must say the outcome is unknown. The same holds for video submission.
func TestSpeechDropIsBilledOnceAndUnknown(t *testing.T) {
	t.Parallel()
	ffmpeg := stubFFmpeg(t, false)
	type op struct {
		name   string
		pipeOp string
		fault  string
		billed func(fake.LedgerSnapshot) int64
		call   func(context.Context, *provider.HTTP, pipeline.CallMeta) error
	}
	ops := []op{
		{"speech", pipeline.OpSpeech, "speech:drop=1", func(l fake.LedgerSnapshot) int64 { return l.Billed.Speech },
			func(ctx context.Context, p *provider.HTTP, m pipeline.CallMeta) error {
				media, err := p.Synthesize(ctx, m, sampleSpeech)
				if err == nil { // read to the end so the connection can be reused
					_, err = io.Copy(io.Discard, media.Body)
					_ = media.Body.Close()
				}
				return err
			}},
		{"video", pipeline.OpVideoSubmit, "video:drop=1", func(l fake.LedgerSnapshot) int64 { return l.Billed.Video },
			func(ctx context.Context, p *provider.HTTP, m pipeline.CallMeta) error {
				_, err := p.SubmitVideo(ctx, m, sampleVideo)
				return err
			}},
	}
	clients := []struct {
		name      string
		keepAlive bool
	}{{"default client", false}, {"keep-alive client", true}}
	for _, o := range ops {
		for _, cl := range clients {
			t.Run(o.name+"/"+cl.name, func(t *testing.T) {
				t.Parallel()
				srv, base := startFake(t, fake.Config{FFmpegPath: ffmpeg, VideoProcessing: -1})
				var mods []func(*provider.Config)
				if cl.keepAlive {
					mods = append(mods, withKeepAliveClient(t))
				}
				p := newClient(t, base, mods...)
				meta := metaFor("job1/scene1", "key-that-must-not-be-sent")
				ctx := context.Background()
				if err := o.call(ctx, p, meta); err != nil { // warms a connection
					t.Fatal(err)
				}
				srv.ResetLedger()
				setFaults(t, srv, o.fault)

				var reused atomic.Bool
				tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
					if i.Reused {
						reused.Store(true)
					}
				}})
				err := o.call(tctx, p, meta)
				wantCallError(t, err, o.pipeOp, pipeline.OutcomeUnknown, provider.CodeConnectionLost, 0)
				if cl.keepAlive && !reused.Load() {
					t.Fatal("the call did not reuse the warm connection; the resend path was not exercised")
				}
				l := srv.Ledger()
				if l.Calls != 1 || o.billed(l) != 1 || l.ByUnit[meta.UnitID].Total() != 1 || len(l.ByIdempotencyKey) != 0 {
					t.Fatalf("one client call: ledger %+v, want exactly one request, billed once, no key", l)
				}
			})
		}
	}
}
