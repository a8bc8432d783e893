// Package webhook delivers job notifications from the outbox (docs/design.md §2:
// webhooks are a view of the job's event log). The store writes a delivery
// row in the same transaction that settles a job — terminal status or
// needs_review — and the Dispatcher here POSTs it, signed, retrying with
// backoff until it is acknowledged or the attempts run out.
//
// Delivery is at least once: a receiver can see the same delivery twice (a
// dispatcher that stalls past its lease is overtaken by another), so it
// should deduplicate on the Edgepipe-Delivery header. Nothing a receiver
// does — failing, timing out, answering 500 — can change the job: the
// dispatcher only ever writes the outbox row.
//
// # Signature
//
// Every request carries
//
//	Edgepipe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// Receivers check it with Verify, which also bounds the timestamp's age so a
// captured request cannot be replayed later.
//
// # SSRF
//
// A webhook URL is chosen by the caller, so edgepipe refuses to send to
// loopback, private, link-local, unspecified, multicast and other
// non-public addresses unless the deployment allows private targets
// explicitly. CheckURL refuses such URLs at submission; the dialer of
// NewClient refuses them again at connect time, on the address actually
// dialled, which is what defeats DNS rebinding (a name that resolved to a
// public address at submission and to 127.0.0.1 later).
package webhook
