// Package provider is edgepipe's HTTP client for the external generation
// providers (image, speech, video). HTTP speaks the API that provider/fake
// serves (see that package's documentation for the wire format); a provider
// behind the same API can be reached by pointing EDGEPIPE_PROVIDER_URL at
// it. The real providers live in provider/workersai and provider/replicate
// and send their requests through Caller, which applies the same rules as
// HTTP (below) to requests of any shape. Routed sends each operation to its
// own provider (EDGEPIPE_PROVIDER, EDGEPIPE_PROVIDER_IMAGE/_SPEECH/_VIDEO).
//
// The package exists to make one promise hold: a scene is paid for once
// (docs/design.md §1.3, §6). Three things serve that promise.
//
//   - Each operation declares its retry contract in a table (ContractTable)
//     before any retry code runs. Only the image operation is
//     idempotent_verified, because a test against the server proves the key
//     is honoured (TestImageContractIdempotentVerifiedIsProven); speech is
//     sync, video submission is async_pollable, everything else fails
//     closed. A declared idempotent_verified row is a candidate: the
//     engine runs it as such only while the job store holds a fresh proof
//     of the deployment's own provider (Probe, `edgepipe provider probe`;
//     pipeline.EffectiveContract).
//   - Requests are built so that nothing but the contract can repeat them.
//     net/http's Transport silently resends a POST on a dropped keep-alive
//     connection when it considers the request replayable (a body it can
//     rewind via Request.GetBody plus an Idempotency-Key header, see
//     Request.isReplayable and persistConn.shouldRetryRequest). For speech
//     and video submission that hidden resend is a second bill the caller
//     never sees, so those requests carry no Idempotency-Key and no GetBody:
//     the transport can neither consider them replayable nor rewind them.
//     Only the image request, whose key the server deduplicates, may be
//     resent by the transport.
//   - Every failure is a *pipeline.CallError whose Outcome says what is known
//     about billing: not_sent (certainly never reached the provider),
//     unknown (may have been processed and billed), rate_limited, rejected,
//     failed. When in doubt the outcome is unknown (docs/design.md §1.1). Code is
//     always one of this package's fixed Code* constants; raw provider text
//     only ever appears in Cause, which is for logs.
//
// Successful media is streamed: pipeline.Media.Body is the live response
// body (never buffered here), and the caller streams it into object storage
// and closes it. A read error from that body is classified like a call
// error.
package provider
