//go:build chromium

package api

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The Chromium suite (go test -tags chromium ./api/) drives a real headless
// Chromium (Debian's chromium package; EDGEPIPE_CHROMIUM names another
// binary) against a real api.Server over a real SQLite store, and checks
// the DOM the browser built from the operator pages. With CI set a missing
// browser fails the suite instead of skipping it.

// storyScreenshot is the story page as Chromium renders it, rewritten by
// every run of TestStoryPageInChromium.
const storyScreenshot = "testdata/admin-job-story.png"

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("EDGEPIPE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (apt-get install -y chromium) and CI is set: the Chromium suite must run")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); skipping the browser test")
	return ""
}

// browser starts headless Chromium sending the operator's Basic
// credentials with every request, and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // as root in a container
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first call starts the browser; it must not carry a timeout.
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": basic("alice", tokAdmin)},
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func TestStoryPageInChromium(t *testing.T) {
	ctx := browser(t) // first: without a browser there is nothing to build
	e := newEnv(t)
	f := buildStory(t, e)
	ts := httptest.NewServer(e.checked(t))
	t.Cleanup(ts.Close)
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	if err := chromedp.Do(tctx, chromedp.Navigate(ts.URL+"/admin/jobs/"+f.JobID), chromedp.WaitVisible(chromedp.CSS("#events"))); err != nil {
		t.Fatalf("load the story page: %v", err)
	}
	title, err := chromedp.Run(tctx, chromedp.Title())
	if err != nil || !strings.Contains(title, f.JobID) || !strings.Contains(title, "succeeded") {
		t.Fatalf("title %q %v", title, err)
	}
	// The DOM as Chromium built it holds every table the page promises,
	// row by row (the same expectations as the server-side test).
	dom, err := chromedp.Run(tctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	checkStoryPage(t, f, dom)

	// What only a browser can say: the tables are laid out (visible, with
	// height), the stylesheet applied (a billed call's pill is green, a
	// waived one amber), and the page loaded nothing besides itself.
	type layout struct {
		Heights   map[string]float64 `json:"heights"`
		Billed    string             `json:"billed"`
		Waived    string             `json:"waived"`
		Resources int                `json:"resources"`
		CallRows  int                `json:"callRows"`
		Reason    string             `json:"reason"`
	}
	got, err := chromedp.Run(tctx, chromedp.Evaluate[layout](`(() => {
		const h = {};
		for (const id of ["job-header", "attempts", "calls", "assets", "claims", "decisions", "events"]) {
			const el = document.getElementById(id);
			h[id] = el ? el.getBoundingClientRect().height : 0;
		}
		const pill = sel => { const el = document.querySelector(sel); return el ? getComputedStyle(el).backgroundColor : ""; };
		return {
			heights: h,
			billed: pill("#calls .pill.billed"),
			waived: pill("#calls .pill.waived"),
			resources: performance.getEntriesByType("resource").length,
			callRows: document.querySelectorAll("#calls tbody tr").length,
			reason: document.querySelector("#decisions tbody tr td:nth-child(3)")?.textContent ?? "",
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for id, h := range got.Heights {
		if h < 20 {
			t.Errorf("#%s is not laid out (height %.0f)", id, h)
		}
	}
	if got.Billed != "rgb(236, 253, 243)" || got.Waived != "rgb(255, 250, 235)" {
		t.Errorf("billing pills not styled: billed %q, waived %q", got.Billed, got.Waived)
	}
	if got.Resources != 0 {
		t.Errorf("the page loaded %d other resources", got.Resources)
	}
	if got.CallRows != 4 || got.Reason != storyReason {
		t.Errorf("%d call rows, reason %q", got.CallRows, got.Reason)
	}

	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
		t.Fatalf("screenshot is %v", b)
	}
	if err := os.MkdirAll(filepath.Dir(storyScreenshot), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storyScreenshot, shot, 0o644); err != nil {
		t.Fatal(err)
	}

	// The list page's filter, through the browser: the job's tenant and
	// status select it, and its link leads to the story.
	if err := chromedp.Do(tctx, chromedp.Navigate(ts.URL+"/admin?tenant=acme&status=succeeded"),
		chromedp.WaitVisible(chromedp.CSS("#job-list")),
		chromedp.Click(chromedp.CSS(`#job-list a[href="/admin/jobs/`+f.JobID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#attempts"))); err != nil {
		t.Fatalf("list page → story: %v", err)
	}
	id, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("#job-id")))
	if err != nil || id != f.JobID {
		t.Fatalf("followed the link to %q (%v)", id, err)
	}
}
